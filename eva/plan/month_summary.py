# A server-month summed up: the figures `eva plan` prints for a variant, a row size's
# figures by the way a reply's rounds are counted, and dollars a day for the chart.
#
# Pure: it is handed the bills eva.plan.server_month made.
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from eva.core.prices import Price
from eva.plan.server_month import (
    PLAN_USD,
    ROUNDS,
    PromptTexts,
    ReplyAssumptions,
    Rounds,
    Timeline,
    Variant,
    VariantBill,
    bill_variant,
)
from eva.plan.tree_cost import DAY_MS, TreeBill


@dataclass(frozen=True, slots=True)
class Summary:
    """A variant's month: the figures `eva plan` prints."""

    name: str
    model: str
    layout: str
    priced: bool
    replies_per_month: float
    replies_usd_per_month: float
    pings_usd_per_month: float
    tree_usd_per_month: float
    usd_per_month: float
    usd_per_reply_p50: float
    usd_per_reply_p95: float
    usd_per_reply_cold: float
    usd_per_reply_warm: float
    cold_share: float
    cache_read_share: float
    largest_prompt_tokens: int
    zoom_depth: float
    """Zooms from the row to a message it covers, on average over replies and messages."""
    margin: float
    """What is left of the plan's price, as a share of it."""


def summarize(
    bill: VariantBill, tree: TreeBill, months: float, zoom_depths: Sequence[float] = ()
) -> Summary:
    """The monthly figures of one variant, the tree's beside its replies."""
    replies = bill.replies
    costs = sorted(reply.usd for reply in replies)
    cold = [reply.usd for reply in replies if reply.cold]
    warm = [reply.usd for reply in replies if not reply.cold]
    prompt = sum(reply.read + reply.write + reply.uncached for reply in replies)
    replies_usd = sum(costs) / months
    pings_usd = sum(ping.usd for ping in bill.pings) / months
    tree_usd = tree.usd / months
    total = replies_usd + pings_usd + tree_usd
    return Summary(
        name=bill.variant.name,
        model=bill.variant.model,
        layout=bill.variant.layout,
        priced=bill.priced,
        replies_per_month=len(replies) / months,
        replies_usd_per_month=replies_usd,
        pings_usd_per_month=pings_usd,
        tree_usd_per_month=tree_usd,
        usd_per_month=total,
        usd_per_reply_p50=_quantile(costs, 0.5),
        usd_per_reply_p95=_quantile(costs, 0.95),
        usd_per_reply_cold=sum(cold) / len(cold) if cold else 0.0,
        usd_per_reply_warm=sum(warm) / len(warm) if warm else 0.0,
        cold_share=len(cold) / len(replies) if replies else 0.0,
        cache_read_share=sum(reply.read for reply in replies) / prompt if prompt else 0.0,
        largest_prompt_tokens=max((reply.largest_prompt for reply in replies), default=0),
        zoom_depth=sum(zoom_depths) / len(zoom_depths) if zoom_depths else 0.0,
        margin=(PLAN_USD - total) / PLAN_USD,
    )


@dataclass(frozen=True, slots=True)
class RowFigures:
    """What one row size costs a month, a reply's rounds counted each way of `ROUNDS`."""

    row_low_bytes: int
    row_high_bytes: int
    zoom_depth: float
    """Zooms from the row to a message it covers, on average over replies and messages."""
    zooms: float
    """Zooms from the row to the message a reply is about, on average over replies."""
    by_rounds: dict[Rounds, Summary]


def row_figures(
    timeline: Timeline,
    tree: TreeBill,
    variant: Variant,
    price: Price | None,
    texts: PromptTexts,
    assumptions: ReplyAssumptions,
    marks: tuple[int, int],
) -> RowFigures:
    """Price `timeline` (played with the row marks `marks`, low and high) with `variant`,
    its replies' tool rounds counted each way of `ROUNDS`."""
    months = timeline.months
    by_rounds = {
        rounds: summarize(
            bill_variant(timeline, variant, price, texts, assumptions, rounds),
            tree, months, timeline.zoom_depths,
        )
        for rounds in ROUNDS
    }
    zooms = timeline.zooms
    return RowFigures(
        row_low_bytes=marks[0],
        row_high_bytes=marks[1],
        zoom_depth=by_rounds["assumed"].zoom_depth,
        zooms=sum(zooms) / len(zooms) if zooms else 0.0,
        by_rounds=by_rounds,
    )


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return 0.0
    return sorted_values[min(len(sorted_values) - 1, math.floor(q * len(sorted_values)))]


def usd_by_day(bill: VariantBill, tree: TreeBill) -> dict[int, float]:
    """Dollars a day (days since the epoch, UTC): replies, pings and the tree."""
    days: dict[int, float] = dict(tree.by_day)
    for reply in bill.replies:
        days[reply.at_ms // DAY_MS] = days.get(reply.at_ms // DAY_MS, 0.0) + reply.usd
    for ping in bill.pings:
        days[ping.at_ms // DAY_MS] = days.get(ping.at_ms // DAY_MS, 0.0) + ping.usd
    return days
