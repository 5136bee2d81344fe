# `eva export --user ID`: what Eva keeps about one person, as they have the right to ask.
from __future__ import annotations

import argparse

import msgspec

from eva.cli.common import (
    UserError,
    add_data_option,
    add_json_option,
    open_store,
    print_json,
    resolve_user,
    user_id_or_name,
)
from eva.core.render import visible
from eva.memory.person import person_data, summary


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "export",
        help="what Eva keeps about one person: their messages, the lines that credit them",
        description=(
            "Print one person's data as Eva keeps it: every stored message of theirs, every "
            "line of the memory whose authors include them (with its address and dates), "
            "and the records that concern them (forgets, Eva's replies to them). Nobody "
            "else's words are included: of a line that credits others too, only what it "
            "says this person said. "
            "With --json, one object whose `messages` and `lines` hold one entry each."
        ),
    )
    parser.add_argument(
        "--user", type=user_id_or_name, required=True,
        help="the person's Discord user id, or a name their stored messages carry",
    )
    parser.add_argument("--guild", type=int, help="only this guild (default: every guild)")
    add_data_option(parser)
    add_json_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    store = open_store(args.data)
    if args.guild is not None and not any(m.guild_id == args.guild for m in store.streams()):
        raise UserError(f"no channel of guild {args.guild} in this data directory")
    data = person_data(store, resolve_user(store, args.user, args.guild), args.guild)
    if args.json:
        print_json(msgspec.to_builtins(data))
        return 0
    print(summary(data))
    for message in data.messages:
        edited = " (edited)" if message.edited else ""
        files = "".join(f" [{name}]" for name in message.attachments)
        print(f"{message.at} #{message.channel_name} [{message.index}]{edited} "
              f"{visible(message.content)}{files}")
    if data.lines:
        print("lines of Eva's memory that credit them:")
    for line in data.lines:
        text = visible(line.text) if line.text else "(no words in it are named as theirs)"
        plural = "s" if line.others != 1 else ""
        others = f" [with {line.others} other{plural}]" if line.others else ""
        print(f"{line.channel} {line.address} {line.first[:10]}..{line.last[:10]}{others} {text}")
    if data.records:
        print("records that concern them:")
    for record in data.records:
        print(f"{record.at} {record.channel} #{record.seq} {record.detail}")
    return 0
