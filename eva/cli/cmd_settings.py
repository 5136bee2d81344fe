# `eva settings`: every setting as Eva would use it, as a TOML settings file.
#
# Shell: it reads the settings file given (or none: the defaults) through the
# same loaders every command uses, and prints all three tables, so its output
# is itself a valid settings file. The repository's `eva.example.toml` is this
# output for the defaults (a test keeps them equal). Secrets never live in the
# settings: they come from the environment, and only whether each is set is
# printed.
from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

import msgspec

from eva.cli.cmd_cost import load_model_settings
from eva.cli.common import add_settings_option, load_live_settings, load_settings

SECRETS = ("DISCORD_TOKEN", "ANTHROPIC_API_KEY")
HEADER = """\
# Eva's settings, every one with the value it has here. Eva reads such a file
# from ~/.config/eva/eva.toml (or where $EVA_SETTINGS points, or --settings FILE);
# a table or key left out keeps its default. Prices are US dollars per million
# tokens, checked on the date in prices_checked; a [models.prices.NAME] table
# changes that model's price field by field.
"""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "settings",
        help="print every setting as Eva would use it (a valid settings file)",
        description=(
            "Print the [memory], [models] and [live] settings, the defaults overridden by "
            "--settings FILE, as TOML that can be given back with --settings. Secrets come "
            "only from the environment (DISCORD_TOKEN, ANTHROPIC_API_KEY): whether each is "
            "set is shown, never its value."
        ),
    )
    add_settings_option(parser)
    parser.set_defaults(run=run)


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value, ensure_ascii=False)


def _table(name: str, values: dict[str, Any], out: list[str]) -> None:
    """One table and the tables nested in it, in TOML."""
    out.append(f"[{name}]")
    nested = {}
    for key, value in values.items():
        if isinstance(value, dict):
            nested[key] = value
        elif value is None:
            out.append(f"# {key} = (not set)")
        else:
            out.append(f"{key} = {_value(value)}")
    out.append("")
    for key, value in nested.items():
        _table(f"{name}.{key}", value, out)


def settings_toml(memory: Any, models: Any, live: Any) -> str:
    """The three tables as one TOML document."""
    out = [HEADER]
    for name, value in (("memory", memory), ("models", models), ("live", live)):
        _table(name, msgspec.to_builtins(value), out)
    return "\n".join(out).rstrip() + "\n"


def run(args: argparse.Namespace) -> int:
    models = load_model_settings(args.settings)
    text = settings_toml(load_settings(args.settings), models, load_live_settings(args.settings))
    print(text, end="")
    note = models.unpriced_note()
    if note is not None:
        print(f"eva settings: {note}", file=sys.stderr)
    source = f"read from {args.settings}" if args.settings else "no settings file: the defaults"
    print(f"# settings {source}")
    for secret in SECRETS:
        state = "set" if os.environ.get(secret, "").strip() else "not set"
        print(f"# {secret}: {state} (from the environment; never shown)")
    return 0
