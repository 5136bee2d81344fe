"""The `eva` command's dispatch: every command known, each loading only its own module."""

from __future__ import annotations

import argparse
import subprocess
import sys

from eva.cli.main import COMMANDS, build_parser


def commands_of(parser: argparse.ArgumentParser) -> set[str]:
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return set(sub.choices)


def test_the_table_names_every_command_its_modules_register() -> None:
    assert commands_of(build_parser()) == set(COMMANDS)
    for name in COMMANDS:
        assert name in commands_of(build_parser(name)), name


def test_a_command_that_needs_no_model_does_not_load_the_model_sdk() -> None:
    probe = (
        "import sys\n"
        "from eva.cli.main import main\n"
        "try:\n"
        "    main(['status', '--data', '/nonexistent-eva-dir'])\n"
        "finally:\n"
        "    print('anthropic' in sys.modules, 'hikari' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)
    assert done.stdout.strip().splitlines()[-1] == "False False"
    assert "no Eva data directory" in done.stderr
