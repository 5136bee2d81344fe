# `eva run`: Eva lives in Discord: the gateway bot for a group of shards, until a stop signal.
#
# Shell: it reads the secrets from the environment (DISCORD_TOKEN, required; ANTHROPIC_API_KEY,
# optional) and the numbers from the TOML settings file ([memory], [models], [live]), then
# hands them to eva.discord.process.run_bot under trio. It knows nothing of Discord itself.
# Invariants: a missing token is reported with exactly what to set, exit status 2, before
# anything is opened; each process writes only its own data directory (`--data`).
from __future__ import annotations

import argparse
import logging
import os
import sys

import trio

from eva.cli.cmd_cost import load_model_settings
from eva.cli.common import (
    UserError,
    add_data_option,
    add_settings_option,
    load_live_settings,
    load_settings,
    open_store,
)

EXIT_NO_TOKEN = 2
TOKEN_HELP = (
    "DISCORD_TOKEN is not set: set it to the bot token from the Discord developer portal "
    "(Applications > your app > Bot > Reset Token), e.g. export DISCORD_TOKEN=..."
)
OFFLINE_WARNING = (
    "warning: ANTHROPIC_API_KEY is not set: Eva runs offline (lines are written without a "
    "model, and she answers only with what recall finds)"
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = subparsers.add_parser(
        "run",
        help="connect to Discord and run Eva (needs DISCORD_TOKEN)",
        description=(
            "Run Eva in the Discord servers she is invited to. Reads DISCORD_TOKEN (required) "
            "and ANTHROPIC_API_KEY (optional: without it Eva runs offline) from the "
            "environment and the rest from the settings file. One process per group of "
            "shards, each with its own data directory."
        ),
    )
    add_data_option(run)
    add_settings_option(run)
    run.add_argument(
        "--shard-ids",
        type=_shard_ids,
        default=None,
        help="the shards this process runs, e.g. 0,1 (default: all of --shard-count)",
    )
    run.add_argument(
        "--shard-count", type=int, default=None, help="shards in all (default: Discord's advice)"
    )
    run.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        default="info",
        help="how much to log, to standard error (default info)",
    )
    run.add_argument("--rest-url", default=None, help=argparse.SUPPRESS)  # tests: a fake Discord
    run.add_argument("--anthropic-url", default=None, help=argparse.SUPPRESS)
    run.set_defaults(run=run_run)


def _shard_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of shard numbers: {text!r}") from None
    if not ids or any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"not a list of shard numbers: {text!r}")
    return ids


def run_run(args: argparse.Namespace) -> int:
    token = os.environ.get("DISCORD_TOKEN", "").strip()
    if not token:
        print(f"eva run: {TOKEN_HELP}", file=sys.stderr)
        return EXIT_NO_TOKEN
    shard_ids: list[int] | None = args.shard_ids
    shard_count: int | None = args.shard_count
    if shard_ids is not None and shard_count is None:
        raise UserError("--shard-ids needs --shard-count")
    if shard_count is not None and shard_count < 1:
        raise UserError("--shard-count must be at least 1")
    if shard_ids is not None and shard_count is not None and max(shard_ids) >= shard_count:
        raise UserError(f"shard ids must be below --shard-count {shard_count}")
    memory = load_settings(args.settings)
    models = load_model_settings(args.settings)
    live = load_live_settings(args.settings)
    key = os.environ.get("ANTHROPIC_API_KEY", "").strip() or None
    if key is None:
        print(OFFLINE_WARNING, file=sys.stderr)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from eva.discord.process import run_bot, token_problem  # hikari is slow to import

    problem = token_problem(token)
    if problem is not None:
        raise UserError(problem)
    open_store(args.data, must_exist=False, write=True)  # one writing process per directory

    return trio.run(
        lambda: run_bot(
            token,
            args.data,
            memory=memory,
            models=models,
            live=live,
            shard_ids=shard_ids,
            shard_count=shard_count,
            rest_url=args.rest_url,
            anthropic_key=key,
            anthropic_base_url=args.anthropic_url,
        )
    )
