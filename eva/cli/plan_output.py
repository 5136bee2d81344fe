# What `eva plan` prints: its figures as JSON, and as lines a person reads.
#
# Shell (it prints), around the plan's figures (eva.plan.month_summary).
from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from eva.core.events import MessagePosted
from eva.core.settings import ModelSettings
from eva.plan.month_summary import RowFigures, Summary
from eva.plan.server_month import (
    PLAN_REPLIES,
    PLAN_USD,
    ROUNDS,
    SEED_FIGURE,
    ReplyAssumptions,
)
from eva.plan.tree_cost import TreeBill

MODELS = ("claude-haiku-5-5", "claude-sonnet-5-5")
"""The reply models a plan prices."""


def kib(size: int) -> str:
    return f"{size / 1024:g}"


def say(text: str) -> None:
    """A line of progress on standard error (standard output holds the plan)."""
    print(f"eva plan: {text}...", file=sys.stderr, flush=True)


def _summary_json(summary: Summary, tree_priced: bool = True) -> dict[str, Any]:
    """One variant's figures; a figure that needs a model the price table lacks is None."""

    def money(value: float, priced: bool = summary.priced) -> float | None:
        return round(value, 6) if priced else None

    return {
        "name": summary.name,
        "reply_model": summary.model,
        "cache_layout": summary.layout,
        "priced": summary.priced,
        "usd_per_month": money(summary.usd_per_month, summary.priced and tree_priced),
        "tree_usd_per_month": money(summary.tree_usd_per_month, tree_priced),
        "replies_usd_per_month": money(summary.replies_usd_per_month),
        "keep_warm_usd_per_month": money(summary.pings_usd_per_month),
        "replies_per_month": round(summary.replies_per_month, 1),
        "usd_per_reply_p50": money(summary.usd_per_reply_p50),
        "usd_per_reply_p95": money(summary.usd_per_reply_p95),
        "usd_per_reply_cold": money(summary.usd_per_reply_cold),
        "usd_per_reply_warm": money(summary.usd_per_reply_warm),
        "cold_share": round(summary.cold_share, 4),
        "cache_read_share": round(summary.cache_read_share, 4),
        "largest_prompt_tokens": summary.largest_prompt_tokens,
        "zoom_depth": round(summary.zoom_depth, 2),
        "margin": round(summary.margin, 4) if summary.priced and tree_priced else None,
    }


def plan_json(
    name: str,
    posts: Sequence[MessagePosted],
    months: float,
    answered: Sequence[int],
    assumptions: ReplyAssumptions,
    models: ModelSettings,
    tree: TreeBill,
    summaries: Sequence[Summary],
) -> dict[str, Any]:
    """The plan as one JSON object: the default settings' figures at the top level, every
    variant under `variants`."""
    tree_priced = models.line_model in models.prices
    headline = _summary_json(summaries[0], tree_priced)
    return {
        "channel": name,
        "messages": len(posts),
        "months": round(months, 2),
        "messages_per_month": round(len(posts) / months, 1),
        "replies": len(answered),
        **headline,
        "price_table_checked": models.prices_checked,
        "plan_usd": PLAN_USD,
        "plan_replies": PLAN_REPLIES,
        "assumptions": {
            "tool_rounds": assumptions.tool_rounds,
            "tool_result_bytes": assumptions.tool_result_bytes,
            "answer_bytes": assumptions.answer_bytes,
            "thinking_tokens": assumptions.thinking_tokens,
            "check_share": assumptions.check_share,
            "bytes_per_token": {
                model: models.prices[model].bytes_per_token
                for model in MODELS if model in models.prices
            },
        },
        "tree": {
            "line_model": models.line_model,
            "batches": models.use_batches,
            "model_tasks": tree.model_tasks,
            "requests": tree.requests,
            "free_lines": tree.free_lines,
            "usd": round(tree.usd, 4) if tree_priced else None,
            "tasks_per_message": round(tree.model_tasks / max(len(posts), 1), 4),
            "seed_figure": SEED_FIGURE,
        },
        "variants": [_summary_json(summary, tree_priced) for summary in summaries],
    }


def rows_json(
    rows: Sequence[RowFigures], tree_priced: bool, recall_finds: float
) -> dict[str, Any]:
    """The default row's month with its replies' rounds counted each way, and every row
    compared: `usd_per_month_zooming`, `usd_per_month_recall_first` and `rows`."""

    def month(summary: Summary) -> float | None:
        return round(summary.usd_per_month, 6) if summary.priced and tree_priced else None

    compared: list[dict[str, Any]] = [
        {
            "row_low_bytes": row.row_low_bytes,
            "row_high_bytes": row.row_high_bytes,
            "zoom_depth": round(row.zoom_depth, 2),
            "zooms_per_reply": round(row.zooms, 2),
            "usd_per_month": {rounds: month(row.by_rounds[rounds]) for rounds in ROUNDS},
            "usd_per_reply_cold": round(row.by_rounds["assumed"].usd_per_reply_cold, 6)
            if row.by_rounds["assumed"].priced else None,
            "largest_prompt_tokens": max(s.largest_prompt_tokens for s in row.by_rounds.values()),
        }
        for row in rows
    ]
    first = compared[0]["usd_per_month"]
    return {
        "usd_per_month_zooming": first["zooming"],
        "usd_per_month_recall_first": first["recall first"],
        "recall_finds": recall_finds,
        "rows": compared,
    }


def describe_rows(result: dict[str, Any]) -> list[str]:
    """The rows compared, as lines of a table."""
    out = [
        f"what a smaller row saves and costs in zooms ({result['name']}; a reply about an "
        "older message: one tool round, zooming down to it, or recall first)",
        f"{'row':<14}{'zoom depth':>11}{'zooms':>7}{'one round':>11}{'zooming':>9}"
        f"{'recall first':>14}{'cold':>9}{'largest':>9}",
    ]
    for number, row in enumerate(result["rows"]):
        usd = row["usd_per_month"]
        cold = row["usd_per_reply_cold"]
        marks = f"{kib(row['row_low_bytes'])}-{kib(row['row_high_bytes'])} KiB"
        out.append(
            f"{'*' if number == 0 else ' '}{marks:<13}{row['zoom_depth']:>11}"
            f"{row['zooms_per_reply']:>7}{_money(usd['assumed']):>11}{_money(usd['zooming']):>9}"
            f"{_money(usd['recall first']):>14}{_money(cold, 4):>9}"
            f"{row['largest_prompt_tokens']:>9,}"
        )
    return out


def _money(value: float | None, digits: int = 2) -> str:
    return "unpriced" if value is None else f"${value:,.{digits}f}"


def describe_plan(result: dict[str, Any]) -> str:
    """The plan as a table a person reads."""
    tree = result["tree"]
    assumed = result["assumptions"]
    out = [
        f"#{result['channel']}: {result['messages']:,} messages over {result['months']} months "
        f"({result['messages_per_month']:,.0f} a month)",
        f"replies: {result['replies']:,} placed ({result['replies_per_month']:,.0f} a month), "
        f"each with {assumed['tool_rounds']} tool round(s) of {assumed['tool_result_bytes']:,} B "
        f"and an answer of {assumed['answer_bytes']:,} B posted into the chat; "
        f"{assumed['thinking_tokens']} tokens of thinking a request; "
        f"{assumed['check_share']:.0%} of replies get the round that checks unread details",
        f"prices checked {result['price_table_checked']}; tokens are UTF-8 bytes over "
        + ", ".join(f"{v} ({k})" for k, v in assumed["bytes_per_token"].items()),
        f"tree: {tree['model_tasks']:,} model tasks in {tree['requests']:,} requests "
        f"({tree['tasks_per_message']} a message), {tree['free_lines']:,} lines free, "
        f"{_money(tree['usd'])} in all with {tree['line_model']}"
        f"{' through batches' if tree['batches'] else ''}; the seed's figure: "
        f"{tree['seed_figure']}",
        f"row: a reply's row is {result['zoom_depth']} zooms above the messages it covers, "
        f"on average; the largest request held {result['largest_prompt_tokens']:,} tokens",
        f"zooming: {_money(result['usd_per_month_zooming'])} a month if a reply about an older "
        "message zooms from its row line down to it, one round a zoom "
        f"({result['rows'][0]['zooms_per_reply']} on average); "
        f"{_money(result['usd_per_month_recall_first'])} with recall first, which finds it "
        f"{result['recall_finds']:.0%} of the time in one round",
        "",
        f"{'reply model and cache layout':<44}{'$/month':>9}{'replies':>9}{'tree':>7}"
        f"{'$/reply p50':>12}{'p95':>9}{'cold':>9}{'warm':>9}{'cold':>6}{'read':>6}"
        f"{'margin':>8}",
    ]
    for i, v in enumerate(result["variants"]):
        star = "*" if i == 0 else " "
        margin = "" if v["margin"] is None else f"{v['margin']:.0%}"
        out.append(
            f"{star}{v['name']:<43}{_money(v['usd_per_month']):>9}"
            f"{_money(v['replies_usd_per_month']):>9}{_money(v['tree_usd_per_month']):>7}"
            f"{_money(v['usd_per_reply_p50'], 4):>12}{_money(v['usd_per_reply_p95'], 4):>9}"
            f"{_money(v['usd_per_reply_cold'], 4):>9}{_money(v['usd_per_reply_warm'], 4):>9}"
            f"{v['cold_share']:>6.0%}{v['cache_read_share']:>6.0%}{margin:>8}"
        )
    out.append(
        f"* the default settings; margin is what is left of the ${result['plan_usd']:.0f} plan; "
        "cold: the reply found no row in the cache; read: prompt tokens read from the cache"
    )
    out += ["", *describe_rows(result)]
    out.append(f"({result['seconds']} s; played offline in a temporary directory)")
    return "\n".join(out)
