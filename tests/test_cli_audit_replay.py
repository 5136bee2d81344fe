"""The memory commands from the command line: audit, replay, build, memory, zoom, recall."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from eva.cli.main import main
from eva.core import keys
from eva.demo.friends import DEMO_QUERY, friends_export
from eva.store.lmdb_kv import open_backend
from eva.store.replay import SCRATCH_PREFIX, clear_left_scratch


@pytest.fixture
def data(tmp_path: Path) -> Path:
    export = tmp_path / "friends.json"
    export.write_bytes(friends_export(700))
    directory = tmp_path / "data"
    assert main(["import", str(export), "--data", str(directory), "--quiet"]) == 0
    settings = tmp_path / "small.toml"
    settings.write_text(
        "[memory]\ncompress_at_bytes = 8192\ntail_keep_bytes = 2048\n"
        "row_high_bytes = 8192\nrow_low_bytes = 4096\n"
    )
    assert main(["build", "friends", "--data", str(directory), "--settings", str(settings)]) == 0
    return directory


def run_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    capsys.readouterr()
    assert main([*args, "--json"]) == 0
    value = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert isinstance(value, dict)
    return value


def test_audit_tells_how_each_line_was_made(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["audit", "friends", "--data", str(data)]) == 0
    out = capsys.readouterr().out
    assert "written (verbatim)" in out
    assert "written (glue)" in out
    assert "written (model offline" in out
    assert "row published (build)" in out
    assert "messages posted" in out
    audit = run_json(capsys, "audit", "friends", "--data", str(data))
    kinds = {entry["kind"] for entry in audit["entries"]}  # type: ignore[attr-defined]
    assert {"line.written", "row.published", "channel.described"} <= kinds


def test_audit_at_a_time_shows_the_row_then(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert main(["audit", "friends", "--data", str(data), "--at", "2001-01-01"]) == 1
    assert "no row was published" in capsys.readouterr().err
    shown = run_json(capsys, "audit", "friends", "--data", str(data), "--at", "2999-01-01")
    lines = shown["lines"]
    assert isinstance(lines, list) and lines
    assert all("+" in line["address"] for line in lines)
    assert main(["audit", "friends", "--data", str(data), "--at", "yesterday"]) == 1
    assert "not a time" in capsys.readouterr().err


def test_memory_zoom_and_recall_json_carry_index_and_address(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = run_json(capsys, "memory", "friends", "--data", str(data))
    row, tail = memory["row"], memory["tail"]
    assert isinstance(row, list) and isinstance(tail, list)
    assert row and all("address" in entry for entry in row)
    assert tail and all("index" in message for message in tail)
    first = row[0]["address"]
    zoomed = run_json(capsys, "zoom", "friends", first, "--data", str(data))
    assert [line["address"] for line in zoomed["lines"]]  # type: ignore[attr-defined]
    one = run_json(capsys, "zoom", "friends", "0+1", "--data", str(data))
    assert one["message"]["index"] == 0  # type: ignore[index]
    found = run_json(capsys, "recall", "friends", *DEMO_QUERY.split(), "--data", str(data))
    windows = found["windows"]
    assert isinstance(windows, list) and windows
    assert all("index" in message for window in windows for message in window)
    capsys.readouterr()
    assert main(["zoom", "friends", "3+3", "--data", str(data)]) == 1
    assert "power of two" in capsys.readouterr().err
    assert main(["zoom", "friends", first, "--page", "2", "--data", str(data)]) == 1
    assert "it has no pages" in capsys.readouterr().err


def test_replay_matches_and_catches_a_changed_projection(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = run_json(capsys, "replay", "--data", str(data))
    assert result["ok"] is True
    backend = open_backend(data)
    meta_keys = []
    with backend.reading() as tables:
        meta_keys = [key for key, _ in tables.scan("messages", b"", b"\xff" * 24)]

    def damage(tables: object) -> None:
        tables.put("messages", meta_keys[3], b"\x93\x00\x00\xc2")  # type: ignore[attr-defined]

    backend.write(damage)
    capsys.readouterr()
    assert main(["replay", "--data", str(data)]) == 1
    out = capsys.readouterr().out
    assert "DIFFERS in messages" in out
    assert keys.stream_of(meta_keys[3]).channel_id > 0
    # --repair writes the rebuild over what differs, then checks it again.
    stream_prefix = meta_keys[3][:16]
    with backend.reading() as tables:
        posting = next(iter(tables.scan("postings", stream_prefix, keys.prefix_end(stream_prefix))))

    def more_damage(tables: object) -> None:
        tables.delete("postings", posting[0])  # type: ignore[attr-defined]
        tables.put("lines", stream_prefix + b"stray", b"x")  # type: ignore[attr-defined]

    backend.write(more_damage)
    repaired = run_json(capsys, "replay", "--data", str(data), "--repair", "--quiet")
    assert repaired["ok"] is True
    [channel] = repaired["channels"]  # type: ignore[misc]
    assert channel["repaired_tables"] == ["messages", "lines", "postings"]
    assert channel["differing_tables"] == []
    assert main(["replay", "--data", str(data)]) == 0
    assert "all 1 channels match" in capsys.readouterr().out
    found = run_json(capsys, "recall", "friends", *DEMO_QUERY.split(), "--data", str(data))
    assert found["windows"]


def test_commands_explain_missing_things(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["memory", "friends", "--data", str(tmp_path / "none")]) == 1
    assert "no Eva data directory" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["zoom", "--help"])
    assert exit_info.value.code == 0
    assert "START+SIZE" in capsys.readouterr().out


def test_build_with_the_model_writes_model_lines_through_the_api(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import re

    from eva.core.events import LineWritten
    from eva.core.keys import StreamId
    from eva.store.event_store import EventStore
    from eva.testing.fake_anthropic import FakeMessagesAPI

    def lines(body: dict[str, object]) -> str:
        text = json.dumps(body["messages"])
        addresses = re.findall(r'<task address=\\"(\d+\+\d+)\\"', text)
        return "\n".join(f'<line address="{a}">Someone: a summary of {a}</line>' for a in addresses)

    export = tmp_path / "friends.json"
    export.write_bytes(friends_export(300))
    directory = tmp_path / "data"
    assert main(["import", str(export), "--data", str(directory), "--quiet"]) == 0
    with FakeMessagesAPI(answer=lines).serve() as fake:
        settings = tmp_path / "model.toml"
        settings.write_text(
            "[memory]\ncompress_at_bytes = 4096\ntail_keep_bytes = 1024\n"
            f'[models]\nbase_url = "{fake.url}"\nuse_batches = false\n'
        )
        monkeypatch.setenv("ANTHROPIC_API_KEY", fake.key)
        assert (
            main(["build", "--model", "--data", str(directory), "--settings", str(settings)]) == 0
        )
        assert fake.message_requests()
    store = EventStore(open_backend(directory))
    stream = StreamId(
        *store.streams()[0].__struct_fields__
        and (store.streams()[0].guild_id, store.streams()[0].channel_id)
    )
    made = [e for _, e in store.events(stream) if isinstance(e, LineWritten) and e.how == "model"]
    assert made
    assert all(line.model == "claude-haiku-5-5" and line.usage is not None for line in made)


def test_audit_at_a_chat_time_shows_the_row_eva_read_then(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import trio

    from eva.core.events import MessagePosted
    from eva.core.keys import StreamId
    from eva.core.settings import MemorySettings
    from eva.core.summarize import OfflineSummarizer
    from eva.memory.build import Memory
    from eva.store.event_store import EventStore

    stream, day = StreamId(3, 4), 86_400_000
    start = 1_560_000_000_000  # 2019-06-08
    posts = [
        MessagePosted(at_ms=start + i * day // 4, index=i, message_id=100 + i, author_id=7,
                      author_name="Ann", content=f"day {i // 4} note {i} " + "word " * 60)
        for i in range(160)
    ]
    data = tmp_path / "data"
    store = EventStore(open_backend(data))
    settings = MemorySettings(compress_at_bytes=8192, tail_keep_bytes=2048,
                              row_high_bytes=8192, row_low_bytes=4096)
    # built long after the chat, as an imported channel is: publishing times are not chat times
    built_ms = 1_800_000_000_000
    store.append(stream, posts[:80])
    trio.run(Memory(store, stream, OfflineSummarizer(), settings).build, built_ms)
    store.append(stream, posts[80:])
    trio.run(Memory(store, stream, OfflineSummarizer(), settings).build, built_ms + day)
    open_backend(data).close()

    def shown(*args: str) -> dict[str, object]:
        capsys.readouterr()
        assert main(["audit", "3/4", *args, "--data", str(data), "--json"]) == 0
        value = json.loads(capsys.readouterr().out)
        assert isinstance(value, dict)
        return value

    # day 21 falls between the two builds' chat: the first row, over the first 80 messages
    first = shown("--chat-at", "2019-06-29")
    second = shown("--chat-at", "2019-08-01")
    assert first["frontier"] < second["frontier"] <= 160
    assert first["published_seq"] < second["published_seq"]
    assert main(["audit", "3/4", "--chat-at", "2019-06-01", "--data", str(data)]) == 1
    err = capsys.readouterr().err
    assert "before its chat reached 2019-06-01" in err and "its first row was published" in err
    assert main(["audit", "3/4", "--at", "2019-06-29", "--data", str(data)]) == 1
    assert "--chat-at takes a time of the chat" in capsys.readouterr().err
    open_backend(data).close()


def test_a_scratch_folder_a_killed_replay_left_is_cleared(tmp_path: Path) -> None:
    gone = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True, text=True, check=True,
    )
    left = tmp_path / f"{SCRATCH_PREFIX}{int(gone.stdout)}-abc"
    (left / "inside").mkdir(parents=True)
    running = tmp_path / f"{SCRATCH_PREFIX}{os.getpid()}-def"
    running.mkdir()
    other = tmp_path / "eva-replay-notapid"
    other.mkdir()
    assert clear_left_scratch(tmp_path) == [left]
    assert not left.exists() and running.exists() and other.exists()
