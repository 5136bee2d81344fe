"""The systemd unit and the container recipe in deploy/: each starts `eva run` as it parses."""

from __future__ import annotations

import configparser
import json
import shlex
from pathlib import Path

from eva.cli.main import build_parser

ROOT = Path(__file__).resolve().parents[1]


def run_args(argv: list[str]) -> object:
    """`eva ARGV` parsed by the real parser (it exits on anything it does not take)."""
    assert argv[0] == "run", argv
    return build_parser("run").parse_args(argv)


def test_the_systemd_unit_runs_one_shard_per_instance() -> None:
    unit = configparser.ConfigParser(interpolation=None, strict=False)
    unit.optionxform = str  # type: ignore[assignment,method-assign]
    unit.read_string((ROOT / "deploy" / "eva@.service").read_text())
    service = unit["Service"]
    command = service["ExecStart"].replace("%i", "3").replace("${EVA_SHARD_COUNT}", "4")
    program, *argv = shlex.split(command)
    assert program.endswith("/bin/eva")
    args = run_args(argv)
    assert (args.shard_ids, args.shard_count) == ([3], 4)  # type: ignore[attr-defined]
    assert str(args.data) == "/var/lib/eva/shard-3"  # type: ignore[attr-defined]
    state = service["StateDirectory"].replace("%i", "3").split()
    assert state[0] == "eva/shard-3"  # the same directory
    # the key store: a directory systemd makes for the unit, outside every data directory
    assert service["Environment"] == "EVA_KEYS=/var/lib/eva/keys" and "eva/keys" in state
    assert service["KillSignal"] == "SIGTERM"  # eva run stops cleanly on it
    assert service["Restart"] == "on-failure"
    assert service["EnvironmentFile"] == "/etc/eva/eva.env"  # the token never in the unit
    assert "TOKEN" not in service["ExecStart"]
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_the_container_recipe_installs_eva_and_runs_it() -> None:
    lines = (ROOT / "deploy" / "Containerfile").read_text().splitlines()
    steps = {}
    for line in lines:
        if line and not line.startswith((" ", "#")):
            word, _, rest = line.partition(" ")
            steps.setdefault(word, []).append(rest)
    assert steps["FROM"][0].startswith("python:3.1")
    for copied in steps["COPY"]:
        for name in copied.split()[:-1]:
            assert (ROOT / name).exists(), name
    assert any("pip install" in step and " ." in step for step in steps["RUN"])
    assert json.loads(steps["ENTRYPOINT"][0]) == ["eva"]
    args = run_args(json.loads(steps["CMD"][0]))
    assert str(args.data) == "/data"  # type: ignore[attr-defined]
    assert steps["STOPSIGNAL"] == ["SIGTERM"]
    assert steps["USER"] == ["eva"]  # not root
