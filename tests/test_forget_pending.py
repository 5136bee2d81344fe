"""A forget a crash left pending: `eva status` shows it, the next writing command finishes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import keyed
from holding import held

from eva.cli.main import main
from eva.core.events import ForgetRequested, MessagePosted
from eva.core.forget import person_hash
from eva.core.keys import StreamId
from eva.demo.friends import friends_export
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend


def pending_forget(tmp_path: Path, built: bool = False) -> tuple[Path, Path, list[str]]:
    """A data directory holding a tombstone of the chat's first author, nothing erased yet;
    the export, and a few long texts of theirs."""
    export = tmp_path / "friends.json"
    export.write_bytes(friends_export(400))
    data = tmp_path / "data"
    assert main(["import", str(export), "--data", str(data), "--quiet"]) == 0
    if built:
        assert main(["build", "--data", str(data)]) == 0
        open_backend(data).close()
    backend = open_backend(data)
    try:
        store = keyed(EventStore(backend))
        [meta] = store.streams()
        stream = StreamId(meta.guild_id, meta.channel_id)
        posts = [e for _, e in store.events(stream) if isinstance(e, MessagePosted)]
        author = posts[0].author_id
        others = {p.content for p in posts if p.author_id != author}
        texts = sorted({
            p.content for p in posts
            if p.author_id == author and len(p.content) > 40 and p.content not in others
        })
    finally:
        backend.close()
    assert texts, "the author wrote nothing long enough to look for"
    if built:  # before the tombstone, the memory and recall show their words
        assert main(["recall", "friends", *search_words(texts[0]), "--data", str(data),
                     "--json"]) == 0
        open_backend(data).close()
    backend = open_backend(data)
    try:
        keyed(EventStore(backend)).append(stream, [ForgetRequested(
            at_ms=posts[-1].at_ms + 1, person_hash=person_hash(author))])
    finally:
        backend.close()
    return data, export, texts[:5]


def search_words(text: str) -> list[str]:
    return [word for word in text.split() if len(word) > 5][:3]


def found_in_files(data: Path, texts: list[str]) -> int:
    """How many of the texts the directory still holds: in its files, or in its log opened."""
    return len(held(data, texts))


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


def test_while_it_is_pending_no_read_command_shows_their_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, _, texts = pending_forget(tmp_path, built=True)
    assert texts[0] in capsys.readouterr().out  # recall found it before the forget
    assert main(["memory", "friends", "--data", str(data)]) == 0
    shown = capsys.readouterr().out
    assert "being made again: it holds words of a person being forgotten" in shown
    for text in texts:
        assert text not in shown
        assert main(["recall", "friends", *search_words(text), "--data", str(data),
                     "--json"]) == 0
        assert text not in capsys.readouterr().out
    backend = open_backend(data)
    try:
        store = keyed(EventStore(backend))
        [meta] = store.streams()
        stream = StreamId(meta.guild_id, meta.channel_id)
        theirs = next(e.index for _, e in store.events(stream)
                      if isinstance(e, MessagePosted) and e.content == texts[0])
    finally:
        backend.close()
    assert main(["zoom", "friends", f"{theirs}+1", "--data", str(data)]) == 0
    assert "this message is being erased" in capsys.readouterr().out
    assert main(["audit", "friends", "--at", "2099-01-01", "--data", str(data)]) == 0
    row_then = capsys.readouterr().out
    assert "being made again" in row_then
    assert not any(text in row_then for text in texts)


def test_forgotten_people_do_not_come_back_through_another_export(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = tmp_path / "friends.json"
    export.write_bytes(friends_export(300))
    data = tmp_path / "data"
    assert main(["import", str(export), "--data", str(data), "--quiet"]) == 0
    value = json.loads(export.read_text())
    author = value["messages"][0]["author"]["id"]
    theirs = [m for m in value["messages"] if m["author"]["id"] == author]
    assert main(["forget", "--user", author, "--data", str(data)]) == 0
    open_backend(data).close()
    capsys.readouterr()

    # The same export again: their ids are known, nothing of theirs is stored again.
    assert main(["import", str(export), "--data", str(data), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["added"], again["skipped_forgotten"]) == (0, 0)
    # Their messages under other ids (a restored backup, another exporter): skipped.
    for message in theirs:
        message["id"] = str(int(message["id"]) + 7)
    # ...and one they write after the forget: theirs again.
    later = dict(theirs[-1], id="9" * 18, timestamp="2030-01-01T00:00:00+00:00",
                 content="back again, hello everyone")
    value["messages"] = [*theirs, later]
    other = tmp_path / "other.json"
    other.write_text(json.dumps(value))
    assert main(["import", str(other), "--data", str(data), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["skipped_forgotten"] == len(theirs)
    assert result["added"] == 1
    assert main(["import", str(other), "--data", str(data)]) == 0
    out = capsys.readouterr().out  # every time: their old messages stay out, the new one known
    assert f"forgotten, skipped  {len(theirs)}" in out and "messages added      0" in out
    open_backend(data).close()
    before = result["messages"]
    # The live pipeline fed from the same export keeps them out too.
    assert main(["serve-local", "--export", str(other), "--speed", "0", "--quiet",
                 "--data", str(data)]) == 0
    open_backend(data).close()
    capsys.readouterr()
    assert main(["status", "--data", str(data), "--json"]) == 0
    [channel] = json.loads(capsys.readouterr().out)["channels"]
    assert channel["messages"] == before
    open_backend(data).close()
