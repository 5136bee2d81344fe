"""A forget a crash left pending: `eva status` shows it, the next writing command finishes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eva.cli.main import main
from eva.core.events import ForgetRequested, MessagePosted
from eva.core.forget import person_hash
from eva.core.keys import StreamId
from eva.demo.friends import friends_export
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend


def pending_forget(tmp_path: Path) -> tuple[Path, Path, list[str]]:
    """A data directory holding a tombstone of the chat's first author, nothing erased yet;
    the export, and a few long texts of theirs."""
    export = tmp_path / "friends.json"
    export.write_bytes(friends_export(400))
    data = tmp_path / "data"
    assert main(["import", str(export), "--data", str(data), "--quiet"]) == 0
    backend = open_backend(data)
    try:
        store = EventStore(backend)
        [meta] = store.streams()
        stream = StreamId(meta.guild_id, meta.channel_id)
        posts = [e for _, e in store.events(stream) if isinstance(e, MessagePosted)]
        author = posts[0].author_id
        others = {p.content for p in posts if p.author_id != author}
        texts = sorted({
            p.content for p in posts
            if p.author_id == author and len(p.content) > 40 and p.content not in others
        })
        store.append(stream, [ForgetRequested(at_ms=posts[-1].at_ms + 1,
                                              person_hash=person_hash(author))])
    finally:
        backend.close()
    assert texts, "the author wrote nothing long enough to look for"
    return data, export, texts[:5]


def found_in_files(data: Path, texts: list[str]) -> int:
    blob = b"".join(path.read_bytes() for path in data.rglob("*") if path.is_file())
    return sum(text.encode() in blob for text in texts)


@pytest.mark.parametrize("command", [["build"], ["import", "{export}"]])
def test_status_shows_it_and_the_next_writing_command_finishes_it(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, export, texts = pending_forget(tmp_path)
    assert found_in_files(data, texts) == len(texts)
    capsys.readouterr()
    assert main(["status", "--data", str(data), "--json"]) == 0
    [channel] = json.loads(capsys.readouterr().out)["channels"]
    assert channel["forgets_pending"] == 1
    assert main(["status", "--data", str(data)]) == 0
    assert "forget in progress in 1 channel(s)" in capsys.readouterr().out

    args = [a.format(export=export) for a in command]
    assert main([*args, "--data", str(data)]) == 0
    assert "finishing 1 forget(s) left pending" in capsys.readouterr().err
    open_backend(data).close()
    assert found_in_files(data, texts) == 0
    assert main(["status", "--data", str(data), "--json"]) == 0
    [channel] = json.loads(capsys.readouterr().out)["channels"]
    assert channel["forgets_pending"] == 0
    open_backend(data).close()
