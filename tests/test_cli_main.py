"""The `eva` command's dispatch: every command known, each loading only its own module."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from eva.cli.main import COMMANDS, EXIT_INTERNAL, build_parser, main
from eva.demo.friends import friends_export


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


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("[memory]\nrow_hgh_bytes = 3\n",
         "unknown field `row_hgh_bytes`; did you mean row_high_bytes?"),
        ("[memroy]\nrow_high_bytes = 3\n", "no table [memroy] is read; did you mean [memory]?"),
        ('[models]\nreply_modle = "x"\n', "did you mean reply_model?"),
        ("[models.prices.claude-haiku-5-5]\nbytes_per_tokn = 3\n",
         "prices of claude-haiku-5-5: Object contains unknown field `bytes_per_tokn`; "
         "did you mean bytes_per_token?"),
        ("[live]\nidle_secs = 3\n", "did you mean idle_seconds?"),
        # a table header left open, or given twice, is named as such
        ("[memory]\nquiet_ms = 1\n[memory\n", "line 3 `[memory` is not closed"),
        ("[memory]\nquiet_ms = 1\n[memory]\n", "[memory] appears more than once"),
        # and values that make no sense, by name
        ('[memory]\ntime_zone = "Nowhere/Zone"\n', "time_zone 'Nowhere/Zone' is no time zone"),
        ('[memory]\ntime_zone = "../../etc/passwd"\n', "is no time zone known here"),
        ("[memory]\ntail_keep_bytes = -1\n", "tail_keep_bytes must be from 0 to"),
        ("[models]\nretries = -1\n", "retries must not be negative"),
        ("[models]\nreplies_per_guild_month = -1\n",
         "replies_per_guild_month must not be negative"),
        ("[models]\nreply_max_tokens = 0\n", "reply_max_tokens must be positive"),
        ("[models]\nbatch_poll_seconds = nan\n", "batch_poll_seconds must be positive"),
    ],
)
def test_a_misspelled_or_senseless_setting_is_refused_by_name(
    text: str, said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "eva.toml"
    settings.write_text(text)
    capsys.readouterr()
    command = "serve-local" if text.startswith("[live]") else "plan"
    assert main([command, "--data", str(tmp_path / "none"), "--settings", str(settings)]) == 1
    assert not (tmp_path / "none").exists()
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


def test_the_example_settings_file_is_every_default_and_loads_as_them(
    capsys: pytest.CaptureFixture[str]
) -> None:
    from eva.cli.cmd_cost import load_model_settings
    from eva.cli.cmd_settings import settings_toml
    from eva.cli.common import load_live_settings, load_settings
    from eva.core.settings import LiveSettings, MemorySettings, ModelSettings

    example = Path(__file__).resolve().parents[1] / "eva.example.toml"
    defaults = (MemorySettings(), ModelSettings(), LiveSettings())
    assert example.read_text() == settings_toml(*defaults), "run eva settings > eva.example.toml"
    assert (load_settings(example), load_model_settings(example),
            load_live_settings(example)) == defaults
    capsys.readouterr()
    assert main(["settings", "--settings", str(example)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(example.read_text())
    assert "# ANTHROPIC_API_KEY: " in out and "# DISCORD_TOKEN: " in out


def test_a_setting_no_longer_read_still_loads(tmp_path: Path) -> None:
    from eva.cli.common import load_live_settings
    from eva.core.settings import LiveSettings

    settings = tmp_path / "eva.toml"
    settings.write_text("[live]\nwrite_process = true\nidle_seconds = 7.0\n")
    assert load_live_settings(settings) == LiveSettings(idle_seconds=7.0)


def test_eva_settings_shows_a_changed_setting_and_never_a_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-very-secret-value")
    settings = tmp_path / "eva.toml"
    settings.write_text('[models]\nreply_model = "claude-sonnet-5-5"\n[memory]\nquiet_ms = 60000\n')
    capsys.readouterr()
    assert main(["settings", "--settings", str(settings)]) == 0
    out = capsys.readouterr().out
    assert 'reply_model = "claude-sonnet-5-5"' in out and "quiet_ms = 60000" in out
    assert "sk-very-secret-value" not in out and "# ANTHROPIC_API_KEY: set" in out


def test_eva_invite_asks_for_exactly_the_permissions_eva_uses(
    capsys: pytest.CaptureFixture[str]
) -> None:
    from urllib.parse import parse_qs, urlsplit

    capsys.readouterr()
    assert main(["invite", "--application-id", "123456789012345678", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    # Discord's documented bits: VIEW_CHANNEL 1 << 10, SEND_MESSAGES 1 << 11,
    # READ_MESSAGE_HISTORY 1 << 16, SEND_MESSAGES_IN_THREADS 1 << 38 (checked 2026-12-06)
    expected = (1 << 10) | (1 << 11) | (1 << 16) | (1 << 38)
    assert result["permissions"] == expected == 274_877_975_552
    url = urlsplit(result["url"])
    assert (url.scheme, url.netloc, url.path) == ("https", "discord.com", "/oauth2/authorize")
    query = parse_qs(url.query)
    assert query == {"client_id": ["123456789012345678"],
                     "scope": ["bot applications.commands"],
                     "permissions": [str(expected)]}
    assert "ADMINISTRATOR" not in result["permission_names"]
    assert main(["invite", "--application-id", "-4"]) == 1
    assert "must be the application's id" in capsys.readouterr().err


def test_version_and_python_m_eva_give_the_installed_distribution() -> None:
    from importlib.metadata import version

    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    done = subprocess.run([sys.executable, "-m", "eva", "--version"], capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"eva {version('eva-chat-memory')}"
    done = subprocess.run([sys.executable, "-m", "eva", "status", "--data", "/nonexistent"],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert done.returncode == 1 and "no Eva data directory" in done.stderr


def test_settings_are_read_from_the_documented_place_without_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "config"
    (home / "eva").mkdir(parents=True)
    (home / "eva" / "eva.toml").write_text("[memory]\nquiet_ms = 45000\n")
    monkeypatch.delenv("EVA_SETTINGS", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    capsys.readouterr()
    assert main(["settings"]) == 0
    out = capsys.readouterr().out
    assert "quiet_ms = 45000" in out and f"# settings read from {home}/eva/eva.toml" in out
    other = tmp_path / "other.toml"
    other.write_text("[memory]\nquiet_ms = 46000\n")
    monkeypatch.setenv("EVA_SETTINGS", str(other))
    assert main(["settings"]) == 0
    assert "quiet_ms = 46000" in capsys.readouterr().out
    monkeypatch.setenv("EVA_SETTINGS", str(tmp_path / "missing.toml"))
    assert main(["settings"]) == 1
    assert "no settings file at" in capsys.readouterr().err
    monkeypatch.delenv("EVA_SETTINGS")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "nothing-here"))
    assert main(["settings"]) == 0
    assert "# settings no settings file: the defaults" in capsys.readouterr().out


def test_a_bad_user_id_in_the_environment_is_named_and_an_empty_data_path_is_the_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("EVA_USER_ID", "abc")
    monkeypatch.setenv("EVA_DATA", "")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as helped:
        main(["--help"])
    assert helped.value.code == 0
    with pytest.raises(SystemExit) as refused:
        main(["forget", "--user", "5"])
    assert refused.value.code == 2
    err = capsys.readouterr().err
    assert "'abc' is no Discord user id (it comes from --eva-id or EVA_USER_ID)" in err
    assert main(["status"]) == 1
    assert "no Eva data directory at eva-data" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_ctrl_c_while_the_commands_load_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from eva.cli import main as cli

    def interrupted(command: str | None = None) -> argparse.ArgumentParser:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["import", "x.json"]) == 130
    assert capsys.readouterr().err == "eva import: interrupted\n"


@pytest.fixture
def imported(tmp_path: Path) -> Path:
    """A data directory holding a short demo chat."""
    data = tmp_path / "data"
    export = tmp_path / "friends.json"
    export.write_bytes(friends_export(200))
    assert main(["import", str(export), "--data", str(data), "--quiet"]) == 0
    return data


def test_ctrl_c_in_a_build_says_what_was_kept_in_one_line(
    imported: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from eva.cli import cmd_build

    data = imported

    async def pressed(*_: object, **__: object) -> None:
        async def key() -> None:
            raise KeyboardInterrupt

        async with trio.open_nursery() as nursery:  # as trio delivers it: in a group
            nursery.start_soon(key)

    monkeypatch.setattr(cmd_build, "build_shown", pressed)
    capsys.readouterr()
    assert main(["build", "--data", str(data)]) == 130
    err = capsys.readouterr().err
    assert err.startswith("eva build: interrupted; the lines made") and "run it again" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_ctrl_c_in_a_forget_says_how_it_is_finished(
    imported: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from eva.cli import cmd_forget

    data = imported

    def pressed(*_: object) -> None:
        raise BaseExceptionGroup("cancelled", [KeyboardInterrupt()])

    monkeypatch.setattr(cmd_forget, "_run", pressed)
    capsys.readouterr()
    assert main(["forget", "--user", "1001", "--data", str(data)]) == 130
    err = capsys.readouterr().err
    assert err.startswith("eva forget: interrupted; ") and "eva forget --resume" in err
    assert "Traceback" not in err


def test_a_group_of_other_errors_is_one_unexpected_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from eva.cli import cmd_status

    def failing(args: argparse.Namespace) -> int:
        raise BaseExceptionGroup("two", [ValueError("one"), LookupError("two")])

    monkeypatch.setattr(cmd_status, "run", failing)
    monkeypatch.delenv("EVA_DEBUG", raising=False)
    assert main(["status"]) == EXIT_INTERNAL
    err = capsys.readouterr().err
    assert err.startswith("eva status: unexpected ExceptionGroup") and err.count("\n") == 1


@pytest.mark.parametrize("command", ["status", "import"])
def test_an_empty_data_file_is_named_and_left_as_it_is(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "data.mdb").write_bytes(b"")
    export = [str(tmp_path / "x.json")] if command == "import" else []
    capsys.readouterr()
    assert main([command, "--data", str(data), *export]) == 1
    assert "is empty (0 bytes)" in capsys.readouterr().err
    assert (data / "data.mdb").stat().st_size == 0
