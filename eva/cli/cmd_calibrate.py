# `eva calibrate`: how many bytes of a channel's own memory make one token, measured.
#
# Shell: it reads one channel's memory block (read only) and asks the Messages
# API's token-counting endpoint (free of charge, nothing is generated) how many
# tokens it holds, for the reply model and the line model. It needs an API key
# (ANTHROPIC_API_KEY) or a base_url in the [models] settings for another
# endpoint that speaks the same API.
# Invariants: it changes no file; it prints the figure and the settings line
# that would use it, and says how far it is from the table's estimate.
from __future__ import annotations

import argparse
import os
from typing import Any

import anthropic
import trio

from eva.cli.cmd_cost import load_model_settings
from eva.cli.common import (
    UserError,
    add_channel_argument,
    add_data_option,
    add_json_option,
    add_settings_option,
    find_stream,
    load_settings,
    open_store,
    print_json,
)
from eva.core.prices import BYTES_PER_TOKEN
from eva.core.settings import ModelSettings
from eva.memory.view import memory_text
from eva.model.client import make_client

BASELINE_TEXT = "."
"""The message counted alone, so that what the API adds to every request is taken off."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "calibrate",
        help="measure the bytes per token of a channel's memory through the token-counting API",
        description=(
            "Count the tokens of one channel's memory block with the Messages API's "
            "token-counting endpoint (no charge, nothing generated), for the reply model and "
            "the line model, and print the bytes per token measured beside the price table's "
            "estimate, with the settings line that would use it. Needs ANTHROPIC_API_KEY, or a "
            "base_url in the [models] settings. Changes no file."
        ),
    )
    add_channel_argument(parser)
    add_data_option(parser)
    add_settings_option(parser)
    add_json_option(parser)
    parser.set_defaults(run=run_calibrate)


async def count(client: anthropic.AsyncAnthropic, model: str, text: str) -> int:
    """The tokens the API counts for one user message of `text`."""
    counted = await client.messages.count_tokens(
        model=model, messages=[{"role": "user", "content": text}]
    )
    return int(counted.input_tokens)


async def measure(
    client: anthropic.AsyncAnthropic, models: list[str], text: str
) -> dict[str, tuple[int, int]]:
    """model -> (tokens of `text`, tokens of the baseline message) per model."""
    out: dict[str, tuple[int, int]] = {}
    async with client:
        for model in models:
            out[model] = (await count(client, model, text), await count(client, model,
                                                                          BASELINE_TEXT))
    return out


def run_calibrate(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    models = load_model_settings(args.settings)
    key = os.environ.get("ANTHROPIC_API_KEY", "").strip()
    if not key and models.base_url is None:
        raise UserError(
            "calibrating needs the token-counting API: set ANTHROPIC_API_KEY, or base_url in "
            "the [models] settings for another endpoint"
        )
    store = open_store(args.data)
    try:
        stream = find_stream(store, args.channel)
        text = memory_text(store, stream, settings)
    finally:
        store.backend.close()
    size = len(text.encode())
    if size < 1000:
        raise UserError(
            f"the memory of {args.channel} holds {size} bytes: too little to measure; "
            "import or build more of it first"
        )
    names = list(dict.fromkeys([models.reply_model, models.line_model]))
    try:
        counted = trio.run(measure, make_client(models, key or "none"), names, text)
    except anthropic.APIStatusError as error:
        raise UserError(
            f"the token-counting API refused: {error.status_code} {error.message}"
        ) from None
    except anthropic.APIConnectionError as error:
        raise UserError(f"cannot reach the token-counting API: {error}") from None
    result = calibration(models, names, size, counted)
    if args.json:
        print_json(result)
    else:
        print(describe(result))
    return 0


def calibration(
    models: ModelSettings, names: list[str], size: int, counted: dict[str, tuple[int, int]]
) -> dict[str, Any]:
    """What was measured, per model, against the table's estimate."""
    rows = []
    for name in names:
        tokens, baseline = counted[name]
        price = models.prices.get(name)
        table = price.bytes_per_token if price is not None else BYTES_PER_TOKEN
        measured = size / max(tokens - baseline, 1)
        rows.append({
            "model": name,
            "tokens": tokens - baseline,
            "bytes_per_token": round(measured, 3),
            "table_bytes_per_token": table,
            "table_error": round(table / measured - 1, 4),
        })
    return {"memory_bytes": size, "models": rows}


def describe(result: dict[str, Any]) -> str:
    out = [f"memory block: {result['memory_bytes']:,} bytes"]
    for row in result["models"]:
        sign = "over" if row["table_error"] > 0 else "under"
        out.append(
            f"{row['model']}: {row['tokens']:,} tokens, {row['bytes_per_token']} bytes a token "
            f"(the table says {row['table_bytes_per_token']}: it {sign}states bytes a token by "
            f"{abs(row['table_error']):.1%})"
        )
        out.append(
            f"  to use it: [models.prices.{row['model']}] bytes_per_token = "
            f"{row['bytes_per_token']}"
        )
    return "\n".join(out)
