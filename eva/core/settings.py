# Every number of the memory, as one settings value with the defaults of DESIGN.md.
#
# Plain data: the shell reads overrides (a TOML file, flags) and hands the core
# a `MemorySettings`; the core never looks anything up itself.
from __future__ import annotations

import msgspec

KIB = 1024
MINUTE_MS = 60_000


class MemorySettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The numbers that shape a channel's memory."""

    line_limit: int = 512
    """Bytes of UTF-8 a line may hold."""
    compress_at_bytes: int = 48 * KIB
    """A compression run starts when the messages with no leaf yet pass this."""
    tail_keep_bytes: int = 12 * KIB
    """A run leaves about this much of the newest chat without leaves, word for word."""
    quiet_ms: int = 30 * MINUTE_MS
    """Publish when the chat has been quiet this long."""
    overflow_tail_bytes: int = 96 * KIB
    """Publish anyway when the tail passes this."""
    row_high_bytes: int = 96 * KIB
    """Row merges start when the rendered row passes this..."""
    row_low_bytes: int = 48 * KIB
    """...and stop once it is at most this."""
    prompt_tail_max_bytes: int = 128 * KIB
    """The tail shown in the prompt never passes this; older uncovered messages are cut."""
    model_calls_in_flight: int = 8
    """Model calls running at once in one process."""
    tasks_per_request: int = 8
    """Leaf and merge tasks sent in one model request."""
    time_zone: str = "UTC"
    """The time zone dates are shown in, unless the channel sets its own."""

    def check(self) -> MemorySettings:
        """The settings themselves, or ValueError naming the first number that makes no sense."""
        if not 16 <= self.line_limit <= 512:
            raise ValueError(f"line_limit must be between 16 and 512 bytes, not {self.line_limit}")
        if self.row_low_bytes > self.row_high_bytes:
            raise ValueError("row_low_bytes must be at most row_high_bytes")
        if self.tail_keep_bytes > self.compress_at_bytes:
            raise ValueError("tail_keep_bytes must be at most compress_at_bytes")
        for name in ("compress_at_bytes", "quiet_ms", "overflow_tail_bytes",
                     "prompt_tail_max_bytes", "model_calls_in_flight", "tasks_per_request"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        return self


class LiveSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The numbers of the running process: actors, inboxes, retries."""

    idle_seconds: float = 300.0
    """An actor with nothing pending sleeps after this long without input."""
    inbox_capacity: int = 64
    """Inputs waiting for one channel before senders are slowed down."""
    writer_capacity: int = 1024
    """Appends waiting for the writer before actors are slowed down."""
    write_process: bool = True
    """Commit in a second process (eva.store.write_process), beside the loop on another
    core, rather than in a thread of this one; for an LMDB store."""
    model_timeout_seconds: float = 120.0
    """A model call taking longer than this counts as failed."""
    retry_first_seconds: float = 5.0
    """After a run that could not finish, wait this long before the next..."""
    retry_most_seconds: float = 600.0
    """...doubling each time, up to this."""
    purge_delay_seconds: float = 600.0
    """Deleted and edited texts leave the data file this long after the last deletion."""

    def check(self) -> LiveSettings:
        """The settings themselves, or ValueError naming the first that makes no sense."""
        for name in ("idle_seconds", "inbox_capacity", "writer_capacity",
                     "model_timeout_seconds", "retry_first_seconds", "retry_most_seconds",
                     "purge_delay_seconds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        return self


class Price(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """List prices of one model in US dollars per million tokens."""

    input: float
    output: float
    cache_write_5m: float | None = None  # default: 1.25 x input
    cache_write_1h: float | None = None  # default: 2 x input
    cache_read: float | None = None  # default: 0.1 x input
    batch_discount: float = 0.5  # the Message Batches API charges this share


def default_prices() -> dict[str, Price]:
    """The price table: list prices per million tokens (a setting; check them before use)."""
    return {
        "claude-haiku-5-5": Price(input=1.0, output=5.0),
        "claude-sonnet-5-5": Price(input=3.0, output=15.0),
        "claude-haiku-4-5": Price(input=1.0, output=5.0),
        "claude-sonnet-4-5": Price(input=3.0, output=15.0),
        "offline": Price(input=0.0, output=0.0),
    }


class ModelSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Which models Eva uses, how she calls them, and what they cost."""

    line_model: str = "claude-haiku-5-5"
    """The small model that writes leaf and merge lines."""
    reply_model: str = "claude-sonnet-5-5"
    """The model Eva answers people with."""
    base_url: str | None = None
    """Another address for the Messages API (tests use a fake on loopback)."""
    use_batches: bool = True
    """Background lines go through the Message Batches API (half price) when not urgent."""
    batch_poll_seconds: float = 30.0
    """How often a pending message batch is checked."""
    retries: int = 6
    """Attempts after the first for a failing request (rate limits, overload, 5xx, timeouts)."""
    request_timeout_seconds: float = 120.0
    too_long_retries: int = 3
    """Times a line that is too long is sent back to be shortened before it is cut."""
    reply_max_tokens: int = 1024
    tool_rounds: int = 4
    """Most rounds of tool use in one reply."""
    replies_per_guild_month: int = 1500
    """Replies Eva gives in one guild in one calendar month (UTC)."""
    cache_ttl: str = "5m"
    """Lifetime asked for the prompt cache entries of replies: "5m" or "1h"."""
    prices: dict[str, Price] = msgspec.field(default_factory=default_prices)
