# The anthropic client Eva uses, and the one retry loop every model call goes through.
#
# Shell: it knows the SDK's errors and HTTP statuses, but nothing of lines,
# rows or prompts. The SDK's own retries are off (max_retries=0) so that this
# loop alone decides: rate limits (honouring retry-after), overload, 5xx,
# timeouts and dropped connections are tried again with capped exponential
# backoff and jitter; a spend or billing limit and a refused request (400,
# 401, 403, 404, ...) raise at once, because trying again cannot help.
# Invariants: at most `settings.retries` attempts after the first; one log line
# per failure, written for the operator.
from __future__ import annotations

import logging
import random
import re
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anthropic
import trio

from eva.core.settings import ModelSettings

log = logging.getLogger(__name__)

T = TypeVar("T")

BACKOFF_FIRST_S = 1.0
BACKOFF_CAP_S = 60.0
RETRY_AFTER_CAP_S = 600.0
RETRY_STATUSES = frozenset({429, 500, 502, 503, 504, 529})

_SPEND_WORDS = re.compile(r"spend|usage limit|billing|credit balance|quota", re.IGNORECASE)
_STATUS_NAMES = {
    400: "bad request",
    401: "authentication failed",
    403: "permission denied",
    404: "not found",
    413: "request too large",
    429: "rate limited",
    500: "server error",
    502: "bad gateway",
    503: "unavailable",
    504: "gateway timeout",
    529: "overloaded",
}
_REFUSAL_HINTS = {
    401: "check the API key",
    403: "the key may not use this model or endpoint",
    404: "check the model name and base_url",
}


class SpendLimitReached(Exception):
    """The provider refuses calls until the account's spend limit or billing is sorted out."""


class ModelRequestRefused(Exception):
    """The provider refused the request itself (400, 401, 403, 404, ...): retrying cannot help."""


class ModelCallFailed(Exception):
    """A call kept failing with errors worth retrying until the retries ran out."""


def make_client(settings: ModelSettings, api_key: str) -> anthropic.AsyncAnthropic:
    """An async client for `settings.base_url` (or Anthropic's), without the SDK's own retries."""
    return anthropic.AsyncAnthropic(
        api_key=api_key,
        base_url=settings.base_url,
        max_retries=0,
        timeout=settings.request_timeout_seconds,
    )


def _message(error: anthropic.APIStatusError) -> str:
    """The provider's own error message, else the SDK's."""
    body = error.body
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
    return str(error.message)


def is_spend_limit(error: BaseException) -> bool:
    """Whether `error` says the account's spend limit, quota or billing stops all calls."""
    if not isinstance(error, anthropic.APIStatusError):
        return False
    return error.status_code in (400, 402, 403, 429) and bool(_SPEND_WORDS.search(_message(error)))


def is_retryable(error: BaseException) -> bool:
    """Whether trying the same call again later may succeed."""
    if is_spend_limit(error):
        return False
    if isinstance(error, anthropic.APIConnectionError):  # timeouts and dropped connections
        return True
    return isinstance(error, anthropic.APIStatusError) and error.status_code in RETRY_STATUSES


def classify(error: BaseException) -> str:
    """A short name of what went wrong, for log lines: "529 overloaded", "timeout", ..."""
    if is_spend_limit(error):
        return "spend limit reached"
    if isinstance(error, anthropic.APITimeoutError):
        return "timeout"
    if isinstance(error, anthropic.APIConnectionError):
        return "connection dropped"
    if isinstance(error, anthropic.APIStatusError):
        name = _STATUS_NAMES.get(error.status_code, "error")
        return f"{error.status_code} {name}"
    return type(error).__name__


def retry_after_s(error: BaseException) -> float | None:
    """The wait the provider asked for in a retry-after header, in seconds, if any."""
    if not isinstance(error, anthropic.APIStatusError):
        return None
    headers = error.response.headers
    millis: str | None = headers.get("retry-after-ms")
    seconds: str | None = headers.get("retry-after")
    try:
        if millis is not None:
            return max(0.0, min(float(millis) / 1000, RETRY_AFTER_CAP_S))
        if seconds is not None:
            return max(0.0, min(float(seconds), RETRY_AFTER_CAP_S))
    except ValueError:
        return None
    return None


def backoff_s(retry: int, first_s: float = BACKOFF_FIRST_S, cap_s: float = BACKOFF_CAP_S) -> float:
    """The wait before retry number `retry` (1, 2, ...): doubling from `first_s`, capped, jittered.

    The jitter keeps between half and all of the doubled wait, so that many
    callers failing together do not come back together.
    """
    full: float = min(cap_s, first_s * 2.0 ** (retry - 1))
    return full * random.uniform(0.5, 1.0)


async def call_with_retries(
    create: Callable[[], Awaitable[T]],
    settings: ModelSettings,
    what: str,
    *,
    backoff_first_s: float = BACKOFF_FIRST_S,
    backoff_cap_s: float = BACKOFF_CAP_S,
) -> T:
    """The result of `create()`, calling it again after failures worth retrying.

    `what` names the call for the operator ("8 line tasks"). Raises
    SpendLimitReached or ModelRequestRefused at once, ModelCallFailed once the
    retries are spent; other exceptions pass through untouched.
    """
    retries = max(0, settings.retries)
    for retry in range(retries + 1):
        try:
            return await create()
        except anthropic.APIError as error:
            kind = classify(error)
            if is_spend_limit(error):
                detail = _message(error) if isinstance(error, anthropic.APIStatusError) else ""
                log.error("model call for %s refused: spend limit reached (%s)", what, detail)
                raise SpendLimitReached(
                    f"model call for {what} refused: the account's spend limit or billing stops "
                    f"all calls until an operator raises it ({detail})"
                ) from error
            if not is_retryable(error):
                raise _refused(error, what, kind) from error
            if retry == retries:
                log.error("model call for %s failed (%s), giving up after %d retries",
                          what, kind, retries)
                raise ModelCallFailed(
                    f"model call for {what} failed {retries + 1} times; last: {kind}"
                ) from error
            wait = retry_after_s(error)
            if wait is None:
                wait = backoff_s(retry + 1, backoff_first_s, backoff_cap_s)
            log.warning("model call for %s failed (%s), retry %d of %d in %.1f s",
                        what, kind, retry + 1, retries, wait)
            await trio.sleep(wait)
    raise AssertionError("unreachable: the loop returns or raises")


def _refused(error: anthropic.APIError, what: str, kind: str) -> ModelRequestRefused:
    detail = _message(error) if isinstance(error, anthropic.APIStatusError) else str(error)
    status = error.status_code if isinstance(error, anthropic.APIStatusError) else 0
    hint = _REFUSAL_HINTS.get(status)
    text = f"model call for {what} refused ({kind}): {detail}"
    if hint:
        text += f"; {hint}"
    log.error("%s", text)
    return ModelRequestRefused(text)
