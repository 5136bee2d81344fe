# Every number of the memory, as one settings value.
#
# Plain data: the shell reads overrides (a TOML file, flags) and hands the core
# a `MemorySettings`; the core never looks anything up itself. The defaults are
# DESIGN.md's: a row merged past 96 KiB down to 48 KiB, about 12 KiB of the newest
# chat word for word, compression from 48 KiB of messages with no leaf. Smaller
# sizes are settings; `eva plan` shows what they save and what they cost in zooms.
from __future__ import annotations

from typing import Literal, TypeAlias
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec

from eva.core.prices import PRICES_CHECKED, Price, default_prices

Listen: TypeAlias = Literal["all", "chosen"]
"""Which channels Eva keeps (LiveSettings.listen, eva.core.channel_switch)."""

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
        if not 0 <= self.tail_keep_bytes <= self.compress_at_bytes:
            raise ValueError("tail_keep_bytes must be from 0 to compress_at_bytes")
        try:
            ZoneInfo(self.time_zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f"time_zone {self.time_zone!r} is no time zone known here: an IANA name such "
                "as Europe/Berlin, or UTC"
            ) from None
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
    model_timeout_seconds: float = 120.0
    """A model call taking longer than this counts as failed."""
    retry_first_seconds: float = 5.0
    """After a run that could not finish, wait this long before the next..."""
    retry_most_seconds: float = 600.0
    """...doubling each time, up to this."""
    purge_delay_seconds: float = 600.0
    """Deleted and edited texts leave the data file this long after the last deletion."""
    command_guilds: tuple[int, ...] = ()
    """Register the slash commands only in these guilds (ids), where they show at once: for
    testing. Empty: registered globally, once at each start, for every server."""
    listen: Listen = "all"
    """Which channels Eva keeps: "all" she can read but those a moderator turned off, or
    "chosen": only those turned on (`/memory-here`, `eva channel`)."""
    left_server_grace_days: float = 30.0
    """A server Eva is removed from is erased this long after (her coming back before
    cancels it); 0: at once."""
    erasure_check_seconds: float = 3600.0
    """How often the bot looks for servers whose grace period is over."""

    def check(self) -> LiveSettings:
        """The settings themselves, or ValueError naming the first that makes no sense."""
        for name in ("idle_seconds", "inbox_capacity", "writer_capacity",
                     "model_timeout_seconds", "retry_first_seconds", "retry_most_seconds",
                     "purge_delay_seconds", "erasure_check_seconds"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if not 0 <= self.left_server_grace_days < 36_500:
            raise ValueError("left_server_grace_days must be from 0 to 36,500")
        return self


class ModelSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Which models Eva uses, how she calls them, and what they cost."""

    line_model: str = "claude-haiku-5-5"
    """The small model that writes leaf and merge lines."""
    line_target_share: float = 0.45
    """The size a merged line is asked to have, as a share of the line limit (85-100% of
    that): a smaller target lets two lines glue into their parent with no model call. A long
    message's leaf is always asked for the whole limit."""
    reply_model: str = "claude-haiku-5-5"
    """The model Eva answers people with..."""
    guild_reply_models: dict[str, str] = msgspec.field(default_factory=dict)
    """...unless a guild (by its id, as a string key) is given another here, e.g. a server
    on a plan with Sonnet 5.5 (`eva plan` shows what each model costs a month)."""
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
    reply_effort: str | None = "low"
    """How hard the reply model thinks (output_config.effort: low, medium, high, ...); its
    thinking is billed as output. None: the model's own default (medium for Haiku 5.5)."""
    tool_rounds: int = 4
    """Most rounds of tool use in one reply."""
    check_guesses: bool = True
    """When a reply states details Eva did not read word for word (eva.core.grounding) and
    tool rounds are left, she gets one more round to check them or drop them."""
    replies_per_guild_month: int = 1500
    """Replies Eva gives in one guild in one calendar month (UTC), at most; past them she
    says she has used them up. The default is what the $15 plan includes; 0: no cap (a
    bot of one's own, whose model bill is its host's)."""
    cache_layout: str = "long"
    """Where replies put their prompt-cache marks and how long each lives (eva.core.prompt):
    "split" (one hour on tools, system and row, five minutes on the tail), "5m", "1h", "none"."""
    reply_prompt_tokens_max: int = 60_000
    """A reply's first request stays under this many tokens by a ceiling count (see
    eva.core.prompt.tokens_at_most): the oldest tail lines, then row lines, are left out."""
    prices: dict[str, Price] = msgspec.field(default_factory=default_prices)
    prices_checked: str = PRICES_CHECKED
    """The day the price table was last checked against the provider's pages."""

    def unpriced(self) -> list[str]:
        """The models these settings use (for replies, any guild's, for lines) that the price
        table lacks: their spend is shown as unpriced, never guessed, never as $0."""
        used = [self.reply_model, *self.guild_reply_models.values(), self.line_model]
        return [model for model in dict.fromkeys(used) if model not in self.prices]

    def unpriced_note(self) -> str | None:
        """One line naming the unpriced models and what to do, or None."""
        missing = self.unpriced()
        if not missing:
            return None
        names = ", ".join(missing)
        return (
            f"{names} {'is' if len(missing) == 1 else 'are'} not in the price table: what "
            "Eva spends with it is shown as unpriced, never guessed; add "
            f"[models.prices.{missing[0]}] with its input and output prices to price it"
        )

    def for_guild(self, guild_id: int) -> ModelSettings:
        """The settings a reply in `guild_id` uses: its own reply model, if it has one."""
        model = self.guild_reply_models.get(str(guild_id))
        if model is None or model == self.reply_model:
            return self
        return msgspec.structs.replace(self, reply_model=model)
