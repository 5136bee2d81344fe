# Model calls under one process-wide limit, each with a time limit.
#
# Shell: wraps any summarizer. A call that hangs past its time limit fails
# like any other failure (the compression run counts it and tries again
# later); at most `model_calls_in_flight` calls run at once in the process.
# Background calls that the inner summarizer sends through the Message Batches
# API (it says so with `background_batches`; a batch can take hours) have their
# own limit of the same size and a time limit of a day, so they neither starve
# urgent calls nor get cut short and sent (and billed) again.
from __future__ import annotations

import logging
from collections.abc import Sequence

import trio

from eva.core.summarize import Summarizer, Summary, Task, summarize_tasks

log = logging.getLogger(__name__)

BACKGROUND_TIMEOUT_S = 26 * 3600.0
"""A message batch may take up to a day to end."""


class LimitedSummarizer:
    """A summarizer behind a shared capacity limiter and a per-call timeout."""

    def __init__(
        self,
        inner: Summarizer,
        limiter: trio.CapacityLimiter,
        timeout_s: float = 120.0,
        background_timeout_s: float = BACKGROUND_TIMEOUT_S,
    ) -> None:
        self.inner = inner
        self.limiter = limiter
        self.background = trio.CapacityLimiter(limiter.total_tokens)
        self.timeout_s = timeout_s
        self.background_timeout_s = background_timeout_s
        self.calls = 0
        self.failures = 0

    async def summarize(self, tasks: Sequence[Task], urgent: bool = True) -> list[Summary]:
        batched = not urgent and bool(getattr(self.inner, "background_batches", False))
        limiter = self.background if batched else self.limiter
        timeout = self.background_timeout_s if batched else self.timeout_s
        async with limiter:
            self.calls += 1
            try:
                with trio.fail_after(timeout):
                    return await summarize_tasks(self.inner, tasks, urgent)
            except trio.TooSlowError:
                self.failures += 1
                raise TimeoutError(f"the model took over {timeout} s") from None
            except Exception:
                self.failures += 1
                raise
