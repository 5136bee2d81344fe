# `eva run`: Eva lives in Discord: the gateway bot for a group of shards, until a stop signal.
#
# Shell: it reads the secrets from the environment (DISCORD_TOKEN, required; ANTHROPIC_API_KEY,
# optional) and the numbers from the TOML settings file ([memory], [models], [live]), then
# hands them to eva.discord.process.run_bot under trio. It knows nothing of Discord itself.
# Invariants: a missing token is reported with exactly what to set, exit status 2, before
# anything is opened; each process writes only its own data directory (`--data`); a process
# of a fleet (`--shard-group`, or its ordinal from the hostname as a StatefulSet's pod) runs
# the shards eva.core.shard_groups gives it, or is refused before anything is opened.
from __future__ import annotations

import argparse
import logging
import os
import socket
import sys
from collections.abc import Callable

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
from eva.core.shard_groups import ShardGroupError, ordinal_of, shard_group

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
    which = run.add_mutually_exclusive_group()
    which.add_argument(
        "--shard-ids",
        type=_shard_ids,
        default=None,
        help="the shards this process runs, e.g. 0,1 (default: all of --shard-count)",
    )
    which.add_argument(
        "--shard-group",
        type=_count(0),
        default=None,
        metavar="ORDINAL",
        help="run the shards of process ORDINAL of a fleet: ORDINAL*K .. ORDINAL*K+K-1, "
        "K being --shards-per-group (needs --shard-count)",
    )
    which.add_argument(
        "--shard-group-from-hostname",
        action="store_true",
        help="as --shard-group, with the ordinal at the end of this host's name, as a "
        "Kubernetes StatefulSet names its pods (eva-0, eva-1, ...)",
    )
    run.add_argument(
        "--shards-per-group",
        type=_count(1),
        default=1,
        metavar="K",
        help="shards each process of the fleet runs, with --shard-group (default 1)",
    )
    run.add_argument(
        "--shard-count", type=int, default=None, help="shards in all (default: Discord's advice)"
    )
    run.add_argument(
        "--health-port",
        type=_port,
        default=None,
        help="answer /livez and /readyz over HTTP on this port, for an orchestrator's probes",
    )
    run.add_argument(
        "--log-level",
        choices=["debug", "info", "warning", "error"],
        default="info",
        help="how much to log, to standard error (default info)",
    )
    run.add_argument(
        "--rest-url", default=None, metavar="URL",
        help="Discord's REST API at URL instead of Discord's own, e.g. the fake Discord "
        "that eva fake-discord serves to try Eva in (the gateway's address is asked of it)",
    )
    run.add_argument(
        "--anthropic-url", default=None, metavar="URL",
        help="the Messages API at URL instead of Anthropic's own (a proxy, or a fake)",
    )
    run.set_defaults(run=run_run)


def _shard_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a list of shard numbers: {text!r}") from None
    if not ids or any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError(f"not a list of shard numbers: {text!r}")
    return ids


def _count(least: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"must be at least {least}, not {value}")
        return value

    return parse


def _port(text: str) -> int:
    value = _count(0)(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"not a TCP port: {value}")
    return value


def group_shards(args: argparse.Namespace, hostname: str) -> list[int] | None:
    """The shard ids `eva run` was told to run, directly or as a fleet's process."""
    grouped = args.shard_group is not None or args.shard_group_from_hostname
    if not grouped:
        if args.shards_per_group != 1:
            raise UserError("--shards-per-group goes with --shard-group or "
                            "--shard-group-from-hostname")
        return args.shard_ids  # type: ignore[no-any-return]
    if args.shard_count is None:
        raise UserError("a shard group needs --shard-count")
    try:
        ordinal = args.shard_group if args.shard_group is not None else ordinal_of(hostname)
        return shard_group(ordinal, args.shards_per_group, args.shard_count)
    except ShardGroupError as error:
        raise UserError(str(error)) from None


def run_run(args: argparse.Namespace) -> int:
    token = os.environ.get("DISCORD_TOKEN", "").strip()
    if not token:
        print(f"eva run: {TOKEN_HELP}", file=sys.stderr)
        return EXIT_NO_TOKEN
    if args.shard_count is not None and args.shard_count < 1:
        raise UserError("--shard-count must be at least 1")
    shard_ids = group_shards(args, socket.gethostname())
    shard_count: int | None = args.shard_count
    if shard_ids is not None and shard_count is None:
        raise UserError("--shard-ids needs --shard-count")
    if shard_ids is not None and shard_count is not None and max(shard_ids) >= shard_count:
        raise UserError(f"shard ids must be below --shard-count {shard_count}")
    memory = load_settings(args.settings)
    models = load_model_settings(args.settings)
    live = load_live_settings(args.settings)
    key = os.environ.get("ANTHROPIC_API_KEY", "").strip() or None
    if key is None:
        print(OFFLINE_WARNING, file=sys.stderr)
    unpriced = models.unpriced_note()
    if unpriced is not None:
        print(f"eva run: {unpriced}", file=sys.stderr)
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    from eva.discord.process import run_bot, token_problem  # hikari is slow to import

    if shard_ids is not None:
        logging.getLogger(__name__).info("running shards %s of %s", shard_ids, shard_count)
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
            health_port=args.health_port,
        )
    )
