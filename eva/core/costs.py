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
from eva.core.prices import Price
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
    """The dollars one request's usage costs at `price` (per million tokens).

    `input_tokens` are the uncached input only, as the Messages API counts them;
    cache writes and reads are charged at their own rates, the one-hour part of
    the writes at the one-hour rate and the rest at the `cache_ttl` rate. The
    whole request pays its tier's rates, chosen by its whole prompt (see
    Price.at). The Message Batches API charges `price.batch_discount` of
    everything. Summed usage of several requests must be priced request by
    request (`reply_cost`), or the tier would be chosen on their sum.
    """
    rates = price.at(usage.prompt_tokens)
    five_minute = usage.cache_write_tokens - usage.cache_write_1h_tokens
    dollars = (
        usage.input_tokens * rates.input
        + usage.output_tokens * rates.output
        + five_minute * write_price(rates, cache_ttl)
        + usage.cache_write_1h_tokens * write_price(rates, "1h")
        + usage.cache_read_tokens * read_price(rates)
    ) / MILLION
    return dollars * price.batch_discount if batch else dollars


def reply_cost(reply: ReplyWritten, price: Price, cache_ttl: str = "5m") -> float:
    """The dollars of one reply: each of its requests priced on its own prompt.

    A reply recorded before requests were kept apart is priced at the base
    rates: its rounds' prompts cannot be told apart from their sum.
    """
    if reply.requests:
        return sum(cost_of(usage, price, cache_ttl=cache_ttl) for usage in reply.requests)
    return cost_of(reply.usage, price.at(0), cache_ttl=cache_ttl)


def add_usage(total: Usage, more: Usage) -> Usage:
    """Two usages summed field by field."""
    return Usage(
        input_tokens=total.input_tokens + more.input_tokens,
        output_tokens=total.output_tokens + more.output_tokens,
        cache_write_tokens=total.cache_write_tokens + more.cache_write_tokens,
        cache_read_tokens=total.cache_read_tokens + more.cache_read_tokens,
        cache_write_1h_tokens=total.cache_write_1h_tokens + more.cache_write_1h_tokens,
    )


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

    def add(self, usage: Usage | None, usd: float | None) -> None:
        """Count one call of `usage` that cost `usd` (None: the model has no price)."""
        self.calls += 1
        if usd is None:
            self.usd = None
        if usage is not None:
            self.input_tokens += usage.input_tokens
            self.output_tokens += usage.output_tokens
            self.cache_write_tokens += usage.cache_write_tokens
            self.cache_read_tokens += usage.cache_read_tokens
        if usd is not None and self.usd is not None:
            self.usd += usd


def line_cost(line: LineWritten, price: Price, cache_ttl: str = "5m") -> float:
    """The dollars of one line made by a model: its batched part at the batch discount.

    A line's usage is its share of a request of a few lines, whose prompt is far
    under any price tier, so its share is priced as a request of its own.
    """
    usage = line.usage
    if usage is None:
        return 0.0
    batched = line.batch_usage
    if batched is None:
        return cost_of(usage, price, cache_ttl=cache_ttl)
    direct = Usage(
        input_tokens=usage.input_tokens - batched.input_tokens,
        output_tokens=usage.output_tokens - batched.output_tokens,
        cache_write_tokens=usage.cache_write_tokens - batched.cache_write_tokens,
        cache_read_tokens=usage.cache_read_tokens - batched.cache_read_tokens,
        cache_write_1h_tokens=usage.cache_write_1h_tokens - batched.cache_write_1h_tokens,
    )
    return cost_of(direct, price, cache_ttl=cache_ttl) + cost_of(
        batched, price, batch=True, cache_ttl=cache_ttl
    )


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
                price = prices.get(event.model)
                usd = None if price is None else line_cost(event, price, cache_ttl)
                _row(report, event.model, "lines").add(event.usage, usd)
        elif isinstance(event, ReplyWritten):
            if event.model == OFFLINE_MODEL:
                report.offline_replies += 1
            else:
                price = prices.get(event.model)
                usd = None if price is None else reply_cost(event, price, cache_ttl)
                _row(report, event.model, "replies").add(event.usage, usd)
    return report


def _row(report: CostReport, model: str, kind: CostKind) -> CostRow:
    key = (model, kind)
    row = report.rows.get(key)
    if row is None:
        row = report.rows[key] = CostRow(model, kind)
    return row
