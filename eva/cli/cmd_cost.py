# `eva cost`: what Eva's recorded model calls cost at list prices.
#
# Shell around eva.core.costs. Invariants: prices come only from the
# settings' table (a model missing from it is reported unpriced, never
# guessed); lines and replies made offline are free.
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import msgspec

from eva.cli.common import (
    UserError,
    add_channel_argument,
    add_data_option,
    add_json_option,
    add_settings_option,
    field_hint,
    find_stream,
    open_store,
    print_json,
    read_table,
    settings_value,
)
from eva.core.costs import CostReport, CostRow, sum_costs
from eva.core.keys import StreamId
from eva.core.prices import Price, default_prices
from eva.core.prompt import CACHE_LAYOUTS
from eva.core.settings import ModelSettings

# -- settings ------------------------------------------------------------------


def load_model_settings(path: Path | None) -> ModelSettings:
    """The model settings: defaults, overridden by the [models] table of a TOML file.

    A [models.prices.NAME] table changes the default price of NAME field by
    field (`bytes_per_token = 2.9` alone is enough) or adds a model, which must
    then give at least `input` and `output`; the models not named keep their
    default price.
    """
    if path is None:
        return ModelSettings()
    data = read_table(path, "models")
    given = data.pop("prices", {})
    if not isinstance(given, dict) or not all(isinstance(v, dict) for v in given.values()):
        raise UserError(f"bad settings in {path}: [models.prices] holds one table per model")
    settings = settings_value(path, data, ModelSettings)
    defaults = default_prices()
    prices = dict(defaults)
    for name, fields in given.items():
        base = msgspec.to_builtins(defaults[name]) if name in defaults else {}
        try:
            prices[name] = msgspec.convert({**base, **fields}, Price).check(name)
        except (msgspec.ValidationError, ValueError) as error:
            raise UserError(
                f"bad settings in {path}: prices of {name}: {error}{field_hint(error, Price)}"
            ) from None
    check_model_settings(path, settings)
    return msgspec.structs.replace(settings, prices=prices)


def check_model_settings(path: Path, settings: ModelSettings) -> None:
    """A UserError naming the first model setting that makes no sense."""
    if settings.cache_layout not in CACHE_LAYOUTS:
        raise UserError(
            f"bad settings in {path}: cache_layout must be one of {', '.join(CACHE_LAYOUTS)}"
        )
    if settings.reply_effort not in (None, *EFFORTS):
        raise UserError(
            f"bad settings in {path}: reply_effort must be one of {', '.join(EFFORTS)}"
        )
    if not 0.2 <= settings.line_target_share <= 1.0:
        raise UserError(f"bad settings in {path}: line_target_share must be from 0.2 to 1.0")
    for guild in settings.guild_reply_models:
        if not guild.isdigit():
            raise UserError(
                f"bad settings in {path}: guild_reply_models is keyed by guild id, not {guild!r}"
            )
    if settings.reply_prompt_tokens_max < 1000:
        raise UserError(f"bad settings in {path}: reply_prompt_tokens_max must be at least 1000")
    for name in ("retries", "too_long_retries", "tool_rounds", "replies_per_guild_month"):
        if getattr(settings, name) < 0:
            raise UserError(f"bad settings in {path}: {name} must not be negative")
    for name in ("batch_poll_seconds", "request_timeout_seconds", "reply_max_tokens"):
        if not getattr(settings, name) > 0:  # NaN too
            raise UserError(f"bad settings in {path}: {name} must be positive")


EFFORTS = ("low", "medium", "high", "xhigh", "max")


def unsplit_ttl(models: ModelSettings) -> str:
    """The lifetime of recorded cache writes whose lifetime was not recorded apart (older
    replies): an hour when every mark lives an hour, else five minutes."""
    return "1h" if models.cache_layout == "1h" else "5m"


# -- eva cost ------------------------------------------------------------------


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cost = subparsers.add_parser(
        "cost",
        help="what the model calls recorded in the logs cost at list prices",
        description=(
            "Sum the usage recorded with lines made by a model and with Eva's replies, "
            "priced at the list prices of the settings' [models.prices] table (no batch "
            "discount), per channel and in total. Models without a price are reported "
            "as unpriced; lines and replies made offline are free."
        ),
    )
    add_channel_argument(cost, optional=True)
    add_data_option(cost)
    add_settings_option(cost)
    add_json_option(cost)
    cost.set_defaults(run=run_cost)



def run_cost(args: argparse.Namespace) -> int:
    models = load_model_settings(args.settings)
    store = open_store(args.data)
    metas = {StreamId(m.guild_id, m.channel_id): m for m in store.streams()}
    streams = [find_stream(store, args.channel)] if args.channel else list(metas)
    total = CostReport()
    channels = []
    for stream in streams:
        events = (event for _, event in store.events(stream))
        report = sum_costs(events, models.prices, cache_ttl=unsplit_ttl(models))
        total.add(report)
        channels.append((stream, metas[stream].channel_name, report))
    if args.json:
        print_json({
            "channels": [
                {"channel": str(s), "name": name, **cost_json(r)} for s, name, r in channels
            ],
            "total": cost_json(total),
            "prices": "list prices per million tokens, no batch discount",
        })
        return 0
    for stream, name, report in channels:
        print(f"#{name} ({stream})")
        print(describe_cost(report, indent="  "))
    if len(channels) > 1:
        print("total")
        print(describe_cost(total, indent="  "))
    return 0


def _row_json(row: CostRow) -> dict[str, Any]:
    return {
        "model": row.model,
        "kind": row.kind,
        "calls": row.calls,
        "input_tokens": row.input_tokens,
        "output_tokens": row.output_tokens,
        "cache_write_tokens": row.cache_write_tokens,
        "cache_read_tokens": row.cache_read_tokens,
        "usd": None if row.usd is None else round(row.usd, 6),
    }


def cost_json(report: CostReport) -> dict[str, Any]:
    """A cost report as one JSON object."""
    return {
        "rows": [_row_json(row) for _, row in sorted(report.rows.items())],
        "lines_usd": round(report.kind_usd("lines"), 6),
        "replies_usd": round(report.kind_usd("replies"), 6),
        "usd": round(report.usd, 6),
        "unpriced": report.unpriced,
        "offline_lines": report.offline_lines,
        "offline_replies": report.offline_replies,
        "free_lines": report.free_lines,
    }


def describe_cost(report: CostReport, indent: str = "") -> str:
    """A cost report as a few lines of text."""
    out = []
    for (_, kind), row in sorted(report.rows.items()):
        usd = "unpriced" if row.usd is None else f"${row.usd:,.4f}"
        out.append(
            f"{indent}{kind:<8}{row.model:<22}{row.calls:>7,} calls  in {row.input_tokens:,}"
            f"  out {row.output_tokens:,}  cache write {row.cache_write_tokens:,}"
            f"  read {row.cache_read_tokens:,}  {usd}"
        )
    out.append(
        f"{indent}total ${report.usd:,.4f} (lines ${report.kind_usd('lines'):,.4f}, "
        f"replies ${report.kind_usd('replies'):,.4f}) at list prices"
    )
    out.append(
        f"{indent}free: {report.offline_lines:,} lines and {report.offline_replies:,} replies "
        f"made offline, {report.free_lines:,} lines made without a model"
    )
    if report.unpriced:
        out.append(f"{indent}unpriced (not in the price table, not counted): "
                   + ", ".join(report.unpriced))
    return "\n".join(out)
