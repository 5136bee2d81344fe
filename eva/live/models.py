# Model calls under one process-wide limit, each with a time limit.
#
# Shell: wraps any summarizer. A call that hangs past its time limit fails
# like any other failure (the compression run counts it and tries again
# later); at most `model_calls_in_flight` calls run at once in the process.
from __future__ import annotations

import logging
from collections.abc import Sequence

import trio

from eva.core.summarize import Summarizer, Summary, Task, summarize_tasks

log = logging.getLogger(__name__)


class LimitedSummarizer:
    """A summarizer behind a shared capacity limiter and a per-call timeout."""

    def __init__(
        self, inner: Summarizer, limiter: trio.CapacityLimiter, timeout_s: float = 120.0
    ) -> None:
        self.inner = inner
        self.limiter = limiter
        self.timeout_s = timeout_s
        self.calls = 0
        self.failures = 0

    async def summarize(self, tasks: Sequence[Task], urgent: bool = True) -> list[Summary]:
        async with self.limiter:
            self.calls += 1
            try:
                with trio.fail_after(self.timeout_s):
                    return await summarize_tasks(self.inner, tasks, urgent)
            except trio.TooSlowError:
                self.failures += 1
                raise TimeoutError(f"the model took over {self.timeout_s} s") from None
            except Exception:
                self.failures += 1
                raise
