# The `eva` command: one subcommand per module, dispatched here.
#
# Each command module exposes `register(subparsers)`, which adds its parser
# and sets `run` (args -> exit status) as the parser's default.
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from eva.cli.common import UserError

COMMAND_MODULES: tuple[str, ...] = (
    "eva.cli.cmd_import",
    "eva.cli.cmd_replay",
    "eva.cli.cmd_audit",
    "eva.cli.cmd_tree",
    "eva.cli.cmd_build",
    "eva.cli.cmd_memory",
    "eva.cli.cmd_demo",
    "eva.cli.cmd_forget",
    "eva.cli.cmd_serve",
    "eva.cli.cmd_status",
    "eva.cli.cmd_cost",
    "eva.cli.cmd_plan",
    "eva.cli.cmd_calibrate",
    "eva.cli.cmd_run",
)


def build_parser() -> argparse.ArgumentParser:
    import importlib

    parser = argparse.ArgumentParser(
        prog="eva",
        description="Eva's memory of Discord channels: import, inspect, replay and audit it.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        status: int = args.run(args)
    except UserError as error:
        print(f"eva {args.command}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print(f"eva {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader of our output went away (`| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as error:  # the machine refused: a full disk, a file gone, no permission
        where = f" ({error.filename})" if error.filename else ""
        print(f"eva {args.command}: {error.strerror or error}{where}", file=sys.stderr)
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
