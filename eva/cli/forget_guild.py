# `eva forget --guild G` with no --user: a whole server erased, and the erasures owed.
#
# Shell: asks before it erases (or takes --yes), records the erasure first, erases and
# proves it (eva.store.guild_erasure), and says so. Any command that writes finishes the
# erasures owed first: one cut short, or a server Eva left whose grace period is over.
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import msgspec

from eva.cli.common import UserError, print_json
from eva.core.erasures import Erasure, describe_erasure
from eva.store.event_store import EventStore
from eva.store.guild_erasure import ask_erasure, due_erasures, erase_guild, erasure_of


def run_forget_guild(args: argparse.Namespace, store: EventStore) -> int:
    guild: int = args.guild
    metas = [m for m in store.streams() if m.guild_id == guild]
    current = erasure_of(store, guild)
    if not metas and (current is None or not current.pending):
        raise UserError(f"no channel of guild {guild} in this data directory")
    messages = sum(m.messages for m in metas)
    if not args.yes:
        _confirm(guild, len(metas), messages)
    now_ms = int(time.time() * 1000)
    ask_erasure(store, guild, "operator", now_ms, now_ms)
    print(
        f"erasure of guild {guild} recorded; erasing {len(metas)} channel(s), {messages} "
        "messages now (if this is cut short, the next command that writes finishes it)",
        file=sys.stderr if args.json else sys.stdout,
        flush=True,
    )
    done = erase_now(store, args.data, guild)
    if args.json:
        print_json({"erasures": [msgspec.to_builtins(done)]})
    else:
        print(describe_erasure(done))
    return 0


def erase_now(store: EventStore, data: Path, guild: int, channel: int = 0) -> Erasure:
    """Do a recorded erasure now and prove it; a UserError if the scan found its texts."""
    done = erase_guild(store, data, guild, int(time.time() * 1000), channel)
    _check(done)
    return done


def _confirm(guild: int, channels: int, messages: int) -> None:
    if not sys.stdin.isatty():
        raise UserError(
            f"this erases all of guild {guild} ({channels} channels, {messages} messages) "
            "for good: give --yes to do it without being asked"
        )
    answer = input(
        f"Erase all of guild {guild}: {channels} channels, {messages} messages, for good? "
        "Type the guild id to go on: "
    )
    if answer.strip() != str(guild):
        raise UserError("nothing was erased")


def _check(done: Erasure) -> None:
    if done.found:
        raise UserError(
            f"ERASURE FAILED: {describe_erasure(done)}; the erasure stays owed and the next "
            "command that writes tries again"
        )


def finish_owed_erasures(store: EventStore, data: Path) -> int:
    """Erase the servers whose erasure is owed (cut short, or the grace period over),
    before a command writes anything else; says so on standard error. How many."""
    now_ms = int(time.time() * 1000)
    owed = due_erasures(store, now_ms)
    for record in owed:
        print(f"eva: erasing first: {describe_erasure(record)}", file=sys.stderr, flush=True)
        _check(erase_guild(store, data, record.guild_id, now_ms, record.channel_id))
    return len(owed)
