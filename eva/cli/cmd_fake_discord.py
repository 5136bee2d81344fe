# `eva fake-discord`: a Discord on this machine to try Eva in, without an account or a token.
#
# Shell: it makes the fake's server and members, prints how to start `eva run` against
# it, then hands the terminal to eva.testing.fake_discord.console until standard input
# ends. Nothing it serves leaves the loopback interface.
from __future__ import annotations

import argparse
import errno
import sys

from eva.cli.common import UserError

DEFAULT_PORT = 8990


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "fake-discord",
        help="a Discord on this machine to try Eva in: post as members, see her answer",
        description=(
            "Serve a fake Discord on 127.0.0.1: one server with #general and #random, a "
            "few members and Eva. It prints the token and the command that starts Eva "
            "against it (eva run --rest-url ...), then reads lines from standard input and "
            "posts each as a member; Eva's answers, command responses and edits are printed "
            "as they come. /help lists what can be typed. Only for trying Eva out: it "
            "keeps nothing when it stops."
        ),
    )
    parser.add_argument(
        "--port", type=int, default=DEFAULT_PORT,
        help=f"loopback port to serve on (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    parser.add_argument(
        "--members", default="ann,bo,cy",
        help="the members' names, comma-separated (default ann,bo,cy); you type as the first",
    )
    parser.add_argument(
        "--data", default="./eva-try",
        help="the data directory the printed eva run command uses (default ./eva-try)",
    )
    parser.set_defaults(run=run, interrupted="the fake Discord stopped; it kept nothing")


def run(args: argparse.Namespace) -> int:
    names = [name.strip() for name in args.members.split(",") if name.strip()]
    if not names or any(not name.replace("_", "").replace(".", "").isalnum() for name in names):
        raise UserError(
            f"--members must be names of letters, digits, _ and . separated by commas, "
            f"not {args.members!r}"
        )
    if len({name.casefold() for name in names}) != len(names):
        raise UserError(f"--members names someone twice: {args.members!r}")
    if not 0 <= args.port <= 65535:
        raise UserError(f"--port must be a TCP port (0 to 65535), not {args.port}")
    from eva.testing.fake_discord.console import HELP, SERVER, console_for, run_console
    from eva.testing.fake_discord.server import FakeDiscord

    fake = FakeDiscord(bot_name="Eva")
    console = console_for(fake, names, sys.stdout)

    def started(served: FakeDiscord) -> None:
        console.say(
            f"A fake Discord is serving at {served.url}: server {SERVER!r} with #general "
            f"and #random, members {', '.join(names)} and Eva.\n"
            "Start Eva against it in another terminal (no key needed: without "
            "ANTHROPIC_API_KEY she answers from what recall finds):\n\n"
            f"  DISCORD_TOKEN={served.token} eva run --rest-url {served.rest_url} "
            f"--data {args.data}\n\n{HELP}\n"
        )

    try:
        run_console(fake, console, sys.stdin, port=args.port, started=started)
    except OSError as error:
        if error.errno == errno.EADDRINUSE:
            raise UserError(
                f"port {args.port} is in use: give another with --port (0 picks a free one)"
            ) from None
        raise
    return 0
