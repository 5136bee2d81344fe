# The log's seals: every event chained to the one before, so that an event altered,
# damaged, dropped or put in after the fact is found and named by its position; a
# forget seals again what it rewrites and says so; an old data directory is sealed
# when it is opened; and no command answers a damaged log with a traceback.
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_forget_cli import BO, GUILD_9, built, close, eva, store_of  # noqa: F401

from eva.core import chain as chain_module
from eva.core import keys
from eva.core.chain import check, check_stream, first_seal, seals
from eva.core.events import LogRewritten, MessagePosted, decode_event, encode_event
from eva.core.keys import CHAIN, LOGS_SEALED, StreamId
from eva.core.tables import Tables
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend

STREAM = StreamId(5, 6)


def stored_log(count: int, stream: StreamId = STREAM) -> list[tuple[bytes, bytes]]:
    return [
        (
            keys.event_key(stream, i),
            encode_event(
                MessagePosted(
                    at_ms=1_700_000_000_000 + i, index=i, message_id=10 + i, author_id=1,
                    author_name="Ann", content=f"message number {i}",
                )
            ),
        )
        for i in range(count)
    ]


def sealed(log: list[tuple[bytes, bytes]], stream: StreamId = STREAM) -> list[tuple[bytes, bytes]]:
    made = seals(first_seal(stream), [data for _, data in log])
    return [(key, link) for (key, _), link in zip(log, made, strict=True)]


def test_a_sound_log_checks_and_its_head_is_the_last_seal() -> None:
    log = stored_log(20)
    chain = sealed(log)
    verdict = check(STREAM, log, chain)
    assert verdict.ok and verdict.events == 20
    assert verdict.head == chain[-1][1].hex()
    assert check(STREAM, [], []).ok


@pytest.mark.parametrize("batch", [1, 4, 7, 4096])
def test_each_kind_of_damage_is_named_by_the_first_position_it_touches(
    batch: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the events are checked a batch at a time: a break is named the same wherever it falls
    monkeypatch.setattr(chain_module, "CHECK_BATCH", batch)
    log, chain = stored_log(30), sealed(stored_log(30))
    flipped = list(log)
    key, data = flipped[12]
    flipped[12] = (key, data[:-3] + bytes([data[-3] ^ 1]) + data[-2:])
    broken = check(STREAM, flipped, chain).broken
    assert broken is not None and broken.position == 12 and "altered" in broken.why

    dropped = log[:7] + log[8:]
    broken = check(STREAM, dropped, chain).broken
    assert broken is not None and broken.position == 7 and "missing" in broken.why

    cut = log[:25]  # the newest events removed, their seals left
    broken = check(STREAM, cut, chain).broken
    assert broken is not None and broken.position == 25

    unsealed = chain[:18] + chain[19:]
    broken = check(STREAM, log, unsealed).broken
    assert broken is not None and broken.position == 18 and "no seal" in broken.why

    # the same log under another channel's key does not verify from its first event
    other = StreamId(5, 7)
    moved = [(keys.event_key(other, keys.seq_of(k)), d) for k, d in log]
    moved_chain = [(keys.event_key(other, keys.seq_of(k)), s) for k, s in chain]
    broken = check(other, moved, moved_chain).broken
    assert broken is not None and broken.position == 0


@settings(max_examples=200, deadline=None)
@given(
    st.integers(min_value=1, max_value=40),
    st.data(),
)
def test_any_one_changed_byte_is_found_at_its_event(count: int, data: st.DataObject) -> None:
    log = stored_log(count)
    chain = sealed(log)
    at = data.draw(st.integers(min_value=0, max_value=count - 1))
    key, stored = log[at]
    offset = data.draw(st.integers(min_value=0, max_value=len(stored) - 1))
    change = data.draw(st.integers(min_value=1, max_value=255))
    altered = list(log)
    altered[at] = (key, stored[:offset] + bytes([stored[offset] ^ change]) + stored[offset + 1 :])
    broken = check(STREAM, altered, chain).broken
    assert broken is not None and broken.position == at


@pytest.fixture
def data(built: Path, tmp_path: Path) -> Path:  # noqa: F811
    copy = tmp_path / "data"
    shutil.copytree(built, copy)
    return copy


def put_event_bytes(data_dir: Path, stream: StreamId, seq: int, stored: bytes) -> None:
    try:
        open_backend(data_dir).write(
            lambda tables: tables.put("events", keys.event_key(stream, seq), stored)
        )
    finally:
        close(data_dir)


def event_bytes(data_dir: Path, stream: StreamId, seq: int) -> bytes:
    try:
        with open_backend(data_dir).reading() as tables:
            found = tables.get("events", keys.event_key(stream, seq))
            assert found is not None
            return bytes(found)
    finally:
        close(data_dir)


def log_check(data_dir: Path, stream: StreamId) -> tuple[bool, int | None]:
    try:
        with open_backend(data_dir).reading() as tables:
            verdict = check_stream(tables, stream)
        return verdict.ok, None if verdict.broken is None else verdict.broken.position
    finally:
        close(data_dir)


def test_every_write_seals_and_replay_and_audit_say_so(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for stream in GUILD_9:
        assert log_check(data, stream) == (True, None)
    capsys.readouterr()
    assert eva("replay", data=data) == 0
    out = capsys.readouterr().out
    assert out.count("log sealed (head ") == 3
    assert eva("audit", "9/1", "--json", data=data) == 0
    log = json.loads(capsys.readouterr().out)["log"]
    assert log["ok"] and log["broken_at"] is None and len(log["head"]) == 32


def test_a_flipped_byte_is_reported_by_replay_and_refused_by_audit(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = GUILD_9[1]
    stored = event_bytes(data, stream, 40)
    # a byte of the message's time: the event still decodes, and opens (its words are sealed)
    posted = decode_event(stored)
    at = stored.index(posted.at_ms.to_bytes(8, "big")) + 7
    put_event_bytes(data, stream, 40, stored[:at] + bytes([stored[at] ^ 1]) + stored[at + 1 :])
    assert log_check(data, stream) == (False, 40)
    capsys.readouterr()
    assert eva("replay", data=data) == 1
    out = capsys.readouterr().out
    assert f"{stream} #" in out and "LOG BROKEN at event 40" in out
    assert "restore the data directory from a backup" in out
    assert eva("replay", "--repair", data=data) == 1  # a broken log is never repaired
    assert "repaired" not in capsys.readouterr().out
    assert eva("replay", "--json", data=data) == 1
    channels = json.loads(capsys.readouterr().out)["channels"]
    broken = [c for c in channels if not c["ok"]]
    assert [c["log"]["broken_at"] for c in broken] == [40]
    assert eva("audit", "9/2", data=data) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "broken at event 40" in err
    assert eva("audit", "9/1", data=data) == 0  # the other channel is sound
    # a command that reads the altered message refuses it, naming it, instead of showing it
    capsys.readouterr()
    assert eva("zoom", "9/2", "40+1", data=data) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "event 40 does not match its seal" in err
    assert eva("zoom", "9/2", "41+1", data=data) == 0  # its neighbour is sound


def test_an_event_that_does_not_decode_is_named_and_no_command_shows_a_traceback(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stream = GUILD_9[0]
    put_event_bytes(data, stream, 3, b"\xc1\xff not an event")
    capsys.readouterr()
    assert eva("replay", data=data) == 1
    out = capsys.readouterr().out
    assert "LOG DAMAGED: event 3 does not decode" in out
    for command in (["audit", "9/1"], ["zoom", "9/1", "3+1"]):
        status = eva(*command, data=data)
        captured = capsys.readouterr()
        assert status == 1, command
        assert "Traceback" not in captured.err and captured.err.count("\n") == 1, captured.err
        assert "event 3" in captured.err or "damaged" in captured.err


def test_a_forget_seals_again_what_it_rewrites_and_records_the_positions(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert eva("forget", "--user", str(BO), data=data) == 0
    store = store_of(data)
    try:
        for stream in GUILD_9:
            records = [(q, e) for q, e in store.events(stream) if isinstance(e, LogRewritten)]
            assert records, stream
            ((at, record),) = records
            assert record.positions == tuple(sorted(record.positions))
            # sealed again from the first rewritten event up to the record itself
            assert record.resealed == at - record.positions[0]
            # each rewritten post no longer holds its text
            for seq in record.positions:
                event = store.event(stream, seq)
                if isinstance(event, MessagePosted):
                    assert event.content == ""
    finally:
        close(data)
    for stream in GUILD_9:
        assert log_check(data, stream) == (True, None)
    capsys.readouterr()
    assert eva("audit", "9/1", data=data) == 0
    assert "log rewritten: " in capsys.readouterr().out
    assert eva("replay", data=data) == 0


def test_an_old_data_directory_is_sealed_when_it_is_opened(data: Path) -> None:
    def unseal(tables: Tables) -> None:
        for key, _ in list(tables.scan(CHAIN, b"", b"\xff" * 25)):
            tables.delete(CHAIN, key)
        tables.delete("layout", LOGS_SEALED)
        assert not check_stream(tables, GUILD_9[0]).ok

    try:
        open_backend(data).write(unseal)
    finally:
        close(data)
    store = EventStore(open_backend(data))
    try:
        with store.backend.reading() as tables:
            assert tables.get("layout", LOGS_SEALED) is not None
        for stream in GUILD_9:
            with store.backend.reading() as tables:
                assert check_stream(tables, stream).ok
    finally:
        close(data)


def test_one_letter_changed_in_the_data_file_itself_is_found(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The case that once passed replay: a letter of a message changed in place in
    data.mdb, same length, with no Eva code involved (the message is sealed: a byte of
    its sealed text)."""
    close(data)
    stream = StreamId(8, 1)
    stored = event_bytes(data, stream, 40)
    file = data / "data.mdb"
    raw = file.read_bytes()
    assert raw.count(stored[-24:]) >= 1  # the page it is on, and older copies of it
    file.write_bytes(raw.replace(stored[-24:], stored[-24:-1] + bytes([stored[-1] ^ 0x20])))
    capsys.readouterr()
    assert eva("replay", "8/1", data=data) == 1
    out = capsys.readouterr().out
    assert "event 40" in out and "altered or damaged" in out
    assert eva("zoom", "8/1", "40+1", data=data) == 1
    assert "does not match its seal" in capsys.readouterr().err
