# The price table: what each model's tokens cost at list prices, and when that was checked.
#
# Plain data and two pure lookups. A price is a setting (the [models.prices]
# table of a settings file replaces it model by model); the defaults below were
# read off the provider's own model pages on the date in PRICES_CHECKED.
# Invariants: a model missing from the table is unpriced, never guessed; a
# request whose prompt passes a model's `long_prompt.above_tokens` is billed
# whole at the long-prompt rates (output included), so the tier is decided per
# request on its whole prompt: uncached input, cache writes and cache reads.
from __future__ import annotations

import msgspec

PRICES_CHECKED = "2026-12-06"
"""The day the default table was checked against platform.claude.com (model overview and
pricing pages)."""

BYTES_PER_TOKEN = 2.7
"""UTF-8 bytes of chat text per token with the newer tokenizer (Claude 4.7 and later, Haiku
5.5 included), checked 2026-12-06. The provider's glossary puts an older-tokenizer token at
about 3.5 characters of English, and the Haiku 5.5 page says the newer tokenizer counts about
30% more tokens for the same text: 3.5 / 1.3 is about 2.7. `eva calibrate` measures it on a
channel's own memory block through the token-counting endpoint."""

BYTES_PER_TOKEN_OLD = 3.5
"""The same for the older tokenizer (Haiku 4.5, Sonnet 4.5 and before)."""


class PriceTier(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The rates a whole request pays once its prompt passes `above_tokens`."""

    above_tokens: int
    input: float
    output: float
    cache_write_5m: float
    cache_write_1h: float
    cache_read: float


class Price(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """List prices of one model in US dollars per million tokens."""

    input: float
    output: float
    cache_write_5m: float | None = None  # default: 1.25 x input
    cache_write_1h: float | None = None  # default: 2 x input
    cache_read: float | None = None  # default: 0.1 x input
    batch_discount: float = 0.5  # the Message Batches API charges this share
    long_prompt: PriceTier | None = None
    """Rates for a request whose whole prompt passes a size (None: one rate at any size)."""
    min_cache_tokens: int = 1024
    """The shortest prefix the provider caches; a mark before it writes and reads nothing."""
    bytes_per_token: float = BYTES_PER_TOKEN
    """How many UTF-8 bytes of text make one token for this model's tokenizer."""

    def at(self, prompt_tokens: int) -> Price:
        """The flat price a request with `prompt_tokens` of prompt pays (its tier's rates)."""
        tier = self.long_prompt
        if tier is None or prompt_tokens <= tier.above_tokens:
            return self
        return Price(
            input=tier.input,
            output=tier.output,
            cache_write_5m=tier.cache_write_5m,
            cache_write_1h=tier.cache_write_1h,
            cache_read=tier.cache_read,
            batch_discount=self.batch_discount,
            min_cache_tokens=self.min_cache_tokens,
            bytes_per_token=self.bytes_per_token,
        )

    @property
    def tier_tokens(self) -> int | None:
        """The prompt size above which the long-prompt rates apply, if the model has one."""
        return None if self.long_prompt is None else self.long_prompt.above_tokens

    def check(self, name: str) -> Price:
        """The price itself, or ValueError naming what makes no sense."""
        rates = [self.input, self.output, self.cache_write_5m, self.cache_write_1h,
                 self.cache_read]
        if any(rate is not None and rate < 0 for rate in rates):
            raise ValueError(f"prices of {name} must not be negative")
        if not 0 < self.batch_discount <= 1:
            raise ValueError(f"batch_discount of {name} must be above 0 and at most 1")
        if self.bytes_per_token <= 0:
            raise ValueError(f"bytes_per_token of {name} must be positive")
        if self.min_cache_tokens < 0:
            raise ValueError(f"min_cache_tokens of {name} must not be negative")
        if self.long_prompt is not None and self.long_prompt.above_tokens <= 0:
            raise ValueError(f"long_prompt.above_tokens of {name} must be positive")
        return self


def default_prices() -> dict[str, Price]:
    """The price table, checked on PRICES_CHECKED (a setting: check it before you rely on it).

    Claude Haiku 5.5 (released 2026-10-07): $0.10 in, $0.50 out, 5-minute cache write
    $0.125, 1-hour write $0.20, cache read $0.01, for prompts up to 100,000 tokens; a
    longer prompt bills the whole request at five times that. Shortest cached prefix 512.
    Claude Sonnet 5.5: $2 in, $10 out, writes $2.50 and $4, read $0.20 as its model page
    gives it (one page of the provider's also names 5% of input, $0.10, for its reads:
    the higher figure is kept until the two agree). Shortest cached prefix 512.
    Claude Haiku 4.5: $1 in, $5 out, the usual multiples, shortest cached prefix 4,096;
    Claude Sonnet 4.5: $3 in, $15 out, shortest cached prefix 1,024; both count with the
    older tokenizer. The Message Batches API halves input and output of every model.
    """
    return {
        "claude-haiku-5-5": Price(
            input=0.10,
            output=0.50,
            cache_write_5m=0.125,
            cache_write_1h=0.20,
            cache_read=0.01,
            long_prompt=PriceTier(
                above_tokens=100_000,
                input=0.50,
                output=2.50,
                cache_write_5m=0.625,
                cache_write_1h=1.00,
                cache_read=0.05,
            ),
            min_cache_tokens=512,
        ),
        "claude-sonnet-5-5": Price(
            input=2.0,
            output=10.0,
            cache_write_5m=2.50,
            cache_write_1h=4.0,
            cache_read=0.20,
            min_cache_tokens=512,
        ),
        "claude-haiku-4-5": Price(
            input=1.0,
            output=5.0,
            cache_write_5m=1.25,
            cache_write_1h=2.0,
            cache_read=0.10,
            min_cache_tokens=4096,
            bytes_per_token=BYTES_PER_TOKEN_OLD,
        ),
        "claude-sonnet-4-5": Price(
            input=3.0,
            output=15.0,
            cache_write_5m=3.75,
            cache_write_1h=6.0,
            cache_read=0.30,
            min_cache_tokens=1024,
            bytes_per_token=BYTES_PER_TOKEN_OLD,
        ),
        "offline": Price(input=0.0, output=0.0),
    }
