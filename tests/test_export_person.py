# `eva export --user`: one person's data, theirs only, counted against what was posted.
from __future__ import annotations

import gzip
import json
import shutil
from collections import Counter
from pathlib import Path

import msgspec
import pytest
from conftest import keyed, keyed_hash
from test_forget_cli import (  # noqa: F401
    BO,
    GUILD_9,
    QUIET,
    built,
    close,
    eva,
    markers_of,
    store_of,
)

from eva.cli.main import main as eva_main
from eva.core.events import LineWritten, MessagePosted
from eva.core.keys import StreamId
from eva.core.render import visible
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend

ANN = 101
SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "komodo-talk-general.dce.json.gz"


@pytest.fixture
def data(built: Path, tmp_path: Path) -> Path:  # noqa: F811
    copy = tmp_path / "data"
    shutil.copytree(built, copy)
    return copy


def export_json(data: Path, capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, object]:
    capsys.readouterr()
    assert eva("export", *args, "--json", data=data) == 0
    value = json.loads(capsys.readouterr().out)
    assert isinstance(value, dict)
    return value


def credited_lines(data: Path, person: int) -> set[tuple[str, str]]:
    """(channel, address) of every current line crediting `person`, read off the log."""
    found: set[tuple[str, str]] = set()
    store = store_of(data)
    try:
        for meta in store.streams():
            stream = StreamId(meta.guild_id, meta.channel_id)
            latest: dict[tuple[int, int], LineWritten] = {}
            for _, event in store.events(stream):
                if isinstance(event, LineWritten):
                    latest[(event.start, event.size)] = event
            for (start, size), line in latest.items():
                current = store.line(stream, start, size)
                if current == line and person in line.authors:
                    found.add((f"{meta.guild_id}/{meta.channel_id}", f"{start}+{size}"))
    finally:
        close(data)
    return found


def test_the_export_holds_their_messages_and_the_lines_that_credit_them_only(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    value = export_json(data, capsys, "--user", str(ANN))
    messages = value["messages"]
    assert isinstance(messages, list)
    wanted = markers_of(ANN)  # from the posts made, not from the store
    assert sorted(m["content"].split()[0] for m in messages) == sorted(wanted)
    others = [mark for person in (202, 303, 404) for mark in markers_of(person)]
    assert not any(mark in m["content"] for m in messages for mark in others)
    lines = value["lines"]
    assert isinstance(lines, list) and lines
    assert {(line["channel"], line["address"]) for line in lines} == credited_lines(data, ANN)
    assert value["channels"] == ["8/1", "9/1", "9/2"]
    # one guild only
    nine = export_json(data, capsys, "--user", str(ANN), "--guild", "9")
    assert {m["channel"] for m in nine["messages"]} == {"9/1", "9/2"}  # type: ignore[union-attr]


def test_after_a_forget_the_export_holds_the_records_and_no_words(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert eva("forget", "--user", str(BO), data=data) == 0
    value = export_json(data, capsys, "--user", str(BO))
    assert value["messages"] == [] and value["lines"] == []
    assert value["deleted_messages"] == 0  # an erased message keeps no author either
    kinds = Counter(r["kind"] for r in value["records"])  # type: ignore[union-attr]
    assert kinds["forget.requested"] == 2 and kinds["forget.applied"] == 2
    capsys.readouterr()
    assert eva("export", "--user", str(BO), data=data) == 0
    out = capsys.readouterr().out
    assert f"user {BO} " in out and "0 messages" in out


def test_a_person_with_nothing_stored_gets_an_empty_export(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    value = export_json(data, capsys, "--user", "555")
    assert value["messages"] == [] and value["lines"] == [] and value["channels"] == []
    with pytest.raises(SystemExit) as usage:
        eva("export", "--user", "0", data=data)
    assert usage.value.code == 2 and "is no Discord user id" in capsys.readouterr().err
    assert eva("export", "--user", "555", "--guild", "-1", data=data) == 1
    assert "no channel of guild -1" in capsys.readouterr().err


def test_control_characters_are_shown_not_obeyed_and_kept_exact_in_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "evil\u202etxt.exe and a NUL\x00 and a bell\x07"
    assert visible(text) == "evil<U+202E>txt.exe and a NUL<U+0000> and a bell<U+0007>"
    assert visible("plain, tabs\tand\nlines") == "plain, tabs\tand\nlines"
    data = tmp_path / "data"
    backend = open_backend(data)
    keyed(EventStore(backend)).append(QUIET, [MessagePosted(
        at_ms=1_700_000_000_000, index=0, message_id=5, author_id=ANN, author_name="Ann",
        content=text,
    )])
    backend.close()
    capsys.readouterr()
    assert eva_main(["export", "--user", str(ANN), "--data", str(data)]) == 0
    out = capsys.readouterr().out
    assert "\u202e" not in out and "\x00" not in out and "<U+202E>" in out
    assert eva_main(["zoom", "8/1", "0+1", "--data", str(data)]) == 0
    assert "<U+202E>" in capsys.readouterr().out
    assert eva_main(["export", "--user", str(ANN), "--json", "--data", str(data)]) == 0
    (message,) = json.loads(capsys.readouterr().out)["messages"]
    assert message["content"] == text
    open_backend(data).close()


@pytest.mark.skipif(not SAMPLE.exists(), reason="the shared sample is absent")
def test_the_shared_channels_most_active_person(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    raw = json.loads(gzip.decompress(SAMPLE.read_bytes()))
    authors = Counter(int(m["author"]["id"]) for m in raw["messages"])
    person, count = authors.most_common(1)[0]
    data = tmp_path / "data"
    assert eva_main(["import", str(SAMPLE), "--data", str(data), "--quiet"]) == 0
    capsys.readouterr()
    assert eva_main(["export", "--user", str(person), "--json", "--data", str(data)]) == 0
    value = json.loads(capsys.readouterr().out)
    assert len(value["messages"]) == count
    theirs = {m["id"] for m in raw["messages"] if int(m["author"]["id"]) == person}
    assert {str(m["message_id"]) for m in value["messages"]} == theirs
    open_backend(data).close()


def test_a_person_is_found_by_a_stored_name_and_an_unclear_name_lists_who_it_may_be(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    by_id = export_json(data, capsys, "--user", str(ANN))
    assert export_json(data, capsys, "--user", "ann") == by_id
    assert export_json(data, capsys, "--user", "@Ann") == by_id
    # someone else whose name holds Ann: the exact name still means one person
    store = store_of(data)
    try:
        stream = StreamId(9, 1)
        meta = store.meta(stream)
        assert meta is not None
        store.append(stream, [MessagePosted(
            at_ms=1_900_000_000_000, index=meta.messages, message_id=990_001,
            author_id=505, author_name="Annika", content="hello from another Ann",
        )])
    finally:
        close(data)
    assert export_json(data, capsys, "--user", "Ann") == by_id
    assert eva("export", "--user", "An", data=data) == 1
    err = capsys.readouterr().err
    assert "'An' may be 2 people: 101 (Ann: " in err and "505 (Annika: 1 messages)" in err
    assert eva("export", "--user", "Bob", data=data) == 1
    err = capsys.readouterr().err
    assert "nobody" not in err and "named 'Bob'; did you mean Bo?" in err
    assert "Copy User ID" in err and "Traceback" not in err
    # forget takes a name too, and forgets whom it names
    capsys.readouterr()
    assert eva("forget", "--user", "bo", "--json", data=data) == 0
    forgets = json.loads(capsys.readouterr().out)["forgets"]
    assert [f["person_hash"] for f in forgets] == [keyed_hash(BO)]


def test_their_part_of_a_line_is_what_it_says_they_said() -> None:
    from eva.core.their_part import their_part

    line = "Ann: the cabin is 2,940 NOK / Bo: I book the ferry / ann: June 14 it is / Cy: ok"
    assert their_part(line, {"Ann"}) == "Ann: the cabin is 2,940 NOK / ann: June 14 it is"
    assert their_part(line, {"Bo", "Bob"}) == "Bo: I book the ferry"
    assert their_part("the group met and agreed to go", {"Ann"}) == ""
    assert their_part(line, set()) == ""


def test_data_files_fit_the_limit_whole_compressed_or_in_parts() -> None:
    import gzip

    from eva.memory.person import MOST_FILES, PersonData, PersonMessage, data_files

    data = PersonData(user_id=7, person_hash="h", messages=[
        PersonMessage(channel="1/2", channel_name="general", index=i, message_id=100 + i,
                      at="2026-01-01T00:00:00+00:00", content=f"message {i} " + "x" * (i % 97))
        for i in range(400)
    ])
    [(name, whole)] = data_files(data, "eva-data-7", 1 << 20)
    assert name == "eva-data-7.json" and msgspec.json.decode(whole)["user_id"] == 7
    [(name, packed)] = data_files(data, "eva-data-7", len(whole) - 1)  # type: ignore[misc]
    assert name == "eva-data-7.json.gz" and len(packed) < len(whole)
    assert msgspec.json.decode(gzip.decompress(packed)) == msgspec.json.decode(whole)
    parts = data_files(data, "eva-data-7", len(packed) // 3)
    assert parts is not None and 3 <= len(parts) <= MOST_FILES
    assert all(len(content) <= len(packed) // 3 for _, content in parts)
    decoded = [msgspec.json.decode(gzip.decompress(content)) for _, content in parts]
    assert [m["index"] for d in decoded for m in d["messages"]] == list(range(400))
    assert data_files(data, "eva-data-7", 100) is None  # not even in MOST_FILES parts
