# `eva opt-out` and `eva opt-in`: "don't remember me" for a person, from the command line.
from __future__ import annotations

import argparse
import time

from eva.cli.common import (
    FIND_USER_ID,
    UserError,
    add_data_option,
    open_store,
    resolve_user,
    user_id_or_name,
)
from eva.core.opt_out import EVERY_GUILD
from eva.store.opt_outs import read_opt_outs, set_opt_out


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    for name, out in (("opt-out", True), ("opt-in", False)):
        parser = subparsers.add_parser(
            name,
            help=(
                "Eva keeps nothing a person writes from now on (their /dont-remember-me)"
                if out else "Eva keeps what a person writes again (their /remember-me)"
            ),
            description=(
                "Record that Eva keeps nothing the person writes from now on: their "
                "messages are not stored, made into lines, recalled, backfilled or "
                "imported. What was kept before stays (eva forget erases it). The record "
                "holds a hash of the id keyed by the key store, not the id. With no --user, "
                "how many people are kept out, per server."
                if out else
                "Undo eva opt-out (or the person's /dont-remember-me): Eva keeps what they "
                "write again, from now on."
            ),
        )
        parser.add_argument(
            "--user", type=user_id_or_name,
            help="the person's Discord user id, or a name their stored messages carry",
        )
        parser.add_argument("--guild", type=int,
                            help="only this server (default: every server)")
        add_data_option(parser)
        parser.set_defaults(run=run, out=out)


def run(args: argparse.Namespace) -> int:
    if args.user is None:
        if not args.out:
            raise UserError(f"say whom with --user ID or --user NAME; {FIND_USER_ID}")
        return _counts(args)
    store = open_store(args.data, must_exist=False, write=True)
    user = resolve_user(store, args.user, args.guild)
    guild = EVERY_GUILD if args.guild is None else args.guild
    where = "every server" if guild == EVERY_GUILD else f"guild {guild}"
    changed = set_opt_out(store, guild, user, args.out, "operator", int(time.time() * 1000))
    if args.out:
        print(f"user {user}: nothing they write in {where} is kept from now on"
              + ("" if changed else " (as before)"))
    else:
        print(f"user {user}: what they write in {where} is kept again"
              + ("" if changed else " (nothing was recorded there)"))
    return 0


def _counts(args: argparse.Namespace) -> int:
    store = open_store(args.data)
    counts: dict[int, int] = {}
    for guild, _ in read_opt_outs(store):
        counts[guild] = counts.get(guild, 0) + 1
    if not counts:
        print("nobody asked not to be kept")
    for guild, count in sorted(counts.items()):
        where = "every server" if guild == EVERY_GUILD else f"guild {guild}"
        print(f"{where}: {count} people kept out")
    return 0
