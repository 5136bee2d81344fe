# What the model calls recorded in a channel's log cost, in US dollars at list prices.
#
# Pure: it is handed usages, events and a price table as values. It may not
# know whether a line went through the Message Batches API or which cache
# lifetime a reply asked for unless the caller says so, and it never guesses a
# price: a model missing from the table is reported as unpriced and adds
# nothing to the dollar totals. Invariants: lines made without a model call
# (how "verbatim" or "glue") cost nothing and are not counted as calls; the
# offline summarizer's lines and replies cost nothing and are counted apart.
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeAlias

from eva.core.events import LineWritten, ReplyWritten, Usage
from eva.core.settings import Price
from eva.core.summarize import OFFLINE_MODEL

MILLION = 1_000_000
CacheTtl: TypeAlias = Literal["5m", "1h"]
CostKind: TypeAlias = Literal["lines", "replies"]
CACHE_TTLS: tuple[CacheTtl, ...] = ("5m", "1h")


def write_price(price: Price, cache_ttl: str = "5m") -> float:
    """Dollars per million tokens written to the prompt cache with lifetime `cache_ttl`."""
    if cache_ttl == "5m":
        return price.cache_write_5m if price.cache_write_5m is not None else 1.25 * price.input
    if cache_ttl == "1h":
        return price.cache_write_1h if price.cache_write_1h is not None else 2.0 * price.input
    raise ValueError(f"cache_ttl must be '5m' or '1h', not {cache_ttl!r}")


def read_price(price: Price) -> float:
    """Dollars per million tokens read from the prompt cache."""
    return price.cache_read if price.cache_read is not None else 0.1 * price.input


def cost_of(usage: Usage, price: Price, *, batch: bool = False, cache_ttl: str = "5m") -> float:
    """The dollars one call's usage costs at `price` (per million tokens).

    `input_tokens` are the uncached input only, as the Messages API counts them;
    cache writes and reads are charged at their own rates. The Message Batches
    API charges `price.batch_discount` of everything.
    """
    dollars = (
        usage.input_tokens * price.input
        + usage.output_tokens * price.output
        + usage.cache_write_tokens * write_price(price, cache_ttl)
        + usage.cache_read_tokens * read_price(price)
    ) / MILLION
    return dollars * price.batch_discount if batch else dollars


@dataclass(slots=True)
class CostRow:
    """The calls of one model for one kind of work, their tokens and their dollars."""

    model: str
    kind: CostKind
    calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_write_tokens: int = 0
    cache_read_tokens: int = 0
    usd: float | None = 0.0
    """None when the model has no price in the table."""

    def add(
        self,
        usage: Usage | None,
        price: Price | None,
        cache_ttl: str,
        batch_usage: Usage | None = None,
    ) -> None:
        """Count one call; `batch_usage` is the part of `usage` sent as a message batch."""
        self.calls += 1
        if price is None:
            self.usd = None
        if usage is None:
            return
        self.input_tokens += usage.input_tokens
        self.output_tokens += usage.output_tokens
        self.cache_write_tokens += usage.cache_write_tokens
        self.cache_read_tokens += usage.cache_read_tokens
        if price is None or self.usd is None:
            return
        if batch_usage is None:
            self.usd += cost_of(usage, price, cache_ttl=cache_ttl)
            return
        direct = Usage(
            input_tokens=usage.input_tokens - batch_usage.input_tokens,
            output_tokens=usage.output_tokens - batch_usage.output_tokens,
            cache_write_tokens=usage.cache_write_tokens - batch_usage.cache_write_tokens,
            cache_read_tokens=usage.cache_read_tokens - batch_usage.cache_read_tokens,
        )
        self.usd += cost_of(direct, price, cache_ttl=cache_ttl)
        self.usd += cost_of(batch_usage, price, batch=True, cache_ttl=cache_ttl)


@dataclass(slots=True)
class CostReport:
    """Recorded model usage per (model, kind), priced where the table knows the model."""

    rows: dict[tuple[str, CostKind], CostRow] = field(default_factory=dict)
    offline_lines: int = 0
    offline_replies: int = 0
    free_lines: int = 0
    """Lines made without any model call (verbatim leaves and glued merges)."""

    @property
    def usd(self) -> float:
        """The dollars of every priced row (unpriced rows add nothing)."""
        return sum(row.usd for row in self.rows.values() if row.usd is not None)

    @property
    def unpriced(self) -> list[str]:
        """The models the price table does not know, sorted."""
        return sorted({row.model for row in self.rows.values() if row.usd is None})

    def kind_usd(self, kind: CostKind) -> float:
        return sum(r.usd for r in self.rows.values() if r.kind == kind and r.usd is not None)

    def add(self, other: CostReport) -> None:
        """Fold another report (another channel) into this one."""
        for key, row in other.rows.items():
            mine = self.rows.setdefault(key, CostRow(row.model, row.kind))
            mine.calls += row.calls
            mine.input_tokens += row.input_tokens
            mine.output_tokens += row.output_tokens
            mine.cache_write_tokens += row.cache_write_tokens
            mine.cache_read_tokens += row.cache_read_tokens
            mine.usd = None if mine.usd is None or row.usd is None else mine.usd + row.usd
        self.offline_lines += other.offline_lines
        self.offline_replies += other.offline_replies
        self.free_lines += other.free_lines


def sum_costs(
    events: Iterable[object], prices: Mapping[str, Price], *, cache_ttl: str = "5m"
) -> CostReport:
    """What the lines made by a model and the replies among `events` cost at list prices.

    Other events are skipped. The part of a line's usage that went through
    the Message Batches API is priced at its discount, the rest as ordinary
    calls; replies' cache writes at the `cache_ttl` rate.
    """
    write_price(Price(input=0.0, output=0.0), cache_ttl)  # refuse a bad ttl even with no events
    report = CostReport()
    for event in events:
        if isinstance(event, LineWritten):
            if event.how != "model":
                report.free_lines += 1
            elif event.model == OFFLINE_MODEL:
                report.offline_lines += 1
            else:
                _row(report, event.model, "lines").add(
                    event.usage, prices.get(event.model), cache_ttl, event.batch_usage
                )
        elif isinstance(event, ReplyWritten):
            if event.model == OFFLINE_MODEL:
                report.offline_replies += 1
            else:
                _row(report, event.model, "replies").add(
                    event.usage, prices.get(event.model), cache_ttl
                )
    return report


def _row(report: CostReport, model: str, kind: CostKind) -> CostRow:
    key = (model, kind)
    row = report.rows.get(key)
    if row is None:
        row = report.rows[key] = CostRow(model, kind)
    return row
