# `eva channel off|on CHANNEL`: Eva's memory of one channel turned off or on, as a moderator's
# /memory-here does, from the command line while the bot is stopped.
from __future__ import annotations

import argparse
import time

from eva.cli.common import (
    UserError,
    add_data_option,
    add_settings_option,
    find_stream,
    load_live_settings,
    open_store,
)
from eva.cli.forget_guild import erase_now
from eva.core.channel_switch import keeps
from eva.core.erasures import describe_erasure
from eva.core.keys import StreamId, parse_stream
from eva.store.event_store import EventStore
from eva.store.guild_erasure import ask_erasure
from eva.store.switches import read_switches, set_switch


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "channel",
        help="turn Eva's memory of a channel off or on (off: nothing of it is kept)",
        description=(
            "Turn Eva's memory of one channel off or on, as a moderator's /memory-here "
            "does. Off, nothing written there is stored, backfilled or imported, and she "
            "does not answer there; what was kept before stays unless --erase is given, "
            "which erases it and scans every file for it as a forget proves itself. With "
            "listen = \"chosen\" in [live], she keeps only the channels turned on. With no "
            "state, every channel turned either way is listed."
        ),
    )
    parser.add_argument("state", nargs="?", choices=["off", "on"], help="off or on")
    parser.add_argument(
        "channel", nargs="?",
        help="GUILD/CHANNEL, or the channel's id or name if Eva has kept it",
    )
    parser.add_argument("--erase", action="store_true",
                        help="with off: erase what was kept of the channel, and prove it")
    add_data_option(parser)
    add_settings_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.state is None:
        return _list(args)
    if args.channel is None:
        raise UserError("say which channel: eva channel off|on GUILD/CHANNEL")
    if args.erase and args.state != "off":
        raise UserError("--erase goes with off")
    store = open_store(args.data, must_exist=False, write=True)
    stream = _stream(store, args.channel)
    now_ms = int(time.time() * 1000)
    set_switch(store, stream, args.state == "on", "operator", now_ms)
    print(f"Eva's memory of {stream} is {args.state}")
    if args.erase:
        ask_erasure(store, stream.guild_id, "operator", now_ms, now_ms, stream.channel_id)
        print(describe_erasure(erase_now(store, args.data, stream.guild_id, stream.channel_id)))
    return 0


def _stream(store: EventStore, text: str) -> StreamId:
    """GUILD/CHANNEL as given (a channel Eva never kept may be turned too), or a channel
    she kept by its id or name."""
    try:
        return parse_stream(text)
    except ValueError:
        return find_stream(store, text)


def _list(args: argparse.Namespace) -> int:
    store = open_store(args.data)
    listen = load_live_settings(args.settings).listen
    print(f"listen = {listen!r}: " + (
        "Eva keeps every channel she can read but those turned off" if listen == "all"
        else "Eva keeps only the channels turned on"
    ))
    for stream, switch in sorted(read_switches(store).items()):
        kept = "kept" if keeps(switch, listen) else "not kept"
        print(f"{stream} {'on' if switch.on else 'off'} ({kept}; by the {switch.by})")
    return 0
