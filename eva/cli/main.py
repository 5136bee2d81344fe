# The `eva` command: one subcommand per module, dispatched here.
#
# Each command module exposes `register(subparsers)`, which adds its parser
# and sets `run` (args -> exit status) as the parser's default.
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import msgspec

from eva.cli.common import UserError
from eva.core.events import DamagedLog, SealedWithoutKeys
from eva.store.key_store import KeyStoreError

EXIT_INTERNAL = 70
"""The exit status of a fault of Eva's own (EX_SOFTWARE)."""

COMMANDS: dict[str, str] = {
    "import": "eva.cli.cmd_import",
    "replay": "eva.cli.cmd_replay",
    "audit": "eva.cli.cmd_audit",
    "tree": "eva.cli.cmd_tree",
    "build": "eva.cli.cmd_build",
    "memory": "eva.cli.cmd_memory",
    "zoom": "eva.cli.cmd_memory",
    "recall": "eva.cli.cmd_memory",
    "ask": "eva.cli.cmd_ask",
    "demo": "eva.cli.cmd_demo",
    "forget": "eva.cli.cmd_forget",
    "export": "eva.cli.cmd_export",
    "verify-erased": "eva.cli.cmd_forget",
    "serve-local": "eva.cli.cmd_serve",
    "status": "eva.cli.cmd_status",
    "reshard": "eva.cli.cmd_reshard",
    "backup": "eva.cli.cmd_backup",
    "restore": "eva.cli.cmd_backup",
    "cost": "eva.cli.cmd_cost",
    "plan": "eva.cli.cmd_plan",
    "calibrate": "eva.cli.cmd_calibrate",
    "settings": "eva.cli.cmd_settings",
    "invite": "eva.cli.cmd_invite",
    "run": "eva.cli.cmd_run",
    "fake-discord": "eva.cli.cmd_fake_discord",
    "channel": "eva.cli.cmd_channel",
    "keys": "eva.cli.cmd_keys",
    "opt-out": "eva.cli.cmd_opt_out",
    "opt-in": "eva.cli.cmd_opt_out",
}
"""Each command and the module that registers it. Only the module of the command given is
imported: some pull in the model SDK, which takes seconds to load, and a forget's promise or
a status should not wait for that."""


DISTRIBUTION = "eva-chat-memory"
"""The name Eva is installed under (the package index's `eva` is another project)."""


def installed_version() -> str:
    """The installed distribution's version, or `unknown` when run from a bare checkout."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of `command` alone when it is known, else of every command (for help)."""
    import importlib

    parser = argparse.ArgumentParser(
        prog="eva",
        description="Eva's memory of Discord channels: import, inspect, replay and audit it.",
    )
    parser.add_argument("--version", action="version", version=f"eva {installed_version()}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    names = [COMMANDS[command]] if command in COMMANDS else list(dict.fromkeys(COMMANDS.values()))
    for name in names:
        importlib.import_module(name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    command = next((word for word in given if not word.startswith("-")), None)
    if command is None and given == ["--version"]:  # no need to load every command for it
        print(f"eva {installed_version()}")
        return 0
    try:
        parser = build_parser(command)  # loads the commands' modules: the slow part of a start
        args = parser.parse_args(given)
    except KeyboardInterrupt:
        print(f"eva {command}: interrupted" if command else "eva: interrupted", file=sys.stderr)
        return 130
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    try:
        status: int = args.run(args)
    except UserError as error:
        print(f"eva {args.command}: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return _interrupted(args)
    except BaseExceptionGroup as group:  # Ctrl-C inside trio comes wrapped in a group
        if group.subgroup(KeyboardInterrupt) is not None:
            return _interrupted(args)
        return _unexpected(args, group)
    except BrokenPipeError:  # the reader of our output went away (`| head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as error:  # the machine refused: a full disk, a file gone, no permission
        where = f" ({error.filename})" if error.filename else ""
        print(f"eva {args.command}: {error.strerror or error}{where}", file=sys.stderr)
        return 1
    except (KeyStoreError, SealedWithoutKeys) as error:  # before DecodeError: one of them
        print(f"eva {args.command}: {error}", file=sys.stderr)
        return 1
    except DamagedLog as error:
        print(
            f"eva {args.command}: the data directory is damaged: {error}. Restore it from a "
            "backup, or import the channel's export into a new one",
            file=sys.stderr,
        )
        return 1
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        print(
            f"eva {args.command}: a stored record does not decode ({error}): the data "
            "directory is damaged; restore it from a backup, or import the channel's export "
            "into a new one",
            file=sys.stderr,
        )
        return 1
    except Exception as error:  # a fault of Eva's own: one line, the details on request
        return _unexpected(args, error)
    return status


def _unexpected(args: argparse.Namespace, error: BaseException) -> int:
    if os.environ.get("EVA_DEBUG"):
        raise error
    print(
        f"eva {args.command}: unexpected {type(error).__name__}: {error}. Nothing more "
        "was done; set EVA_DEBUG=1 to see where it happened, and please report it",
        file=sys.stderr,
    )
    return EXIT_INTERNAL


def _interrupted(args: argparse.Namespace) -> int:
    """Ctrl-C: one line, with what the command kept and how to finish, where it says."""
    kept = getattr(args, "interrupted", "")
    print(f"eva {args.command}: interrupted{'; ' + kept if kept else ''}", file=sys.stderr)
    return 130


if __name__ == "__main__":
    sys.exit(main())
