# Sealing at rest: what people wrote, and who they are, stored only as ciphertext under
# their own keys; read back whole while the keys are there, blank once a key is destroyed
# (a line credits several people: losing any one of their keys loses it), and an error
# naming the key store when a key was never there.
from __future__ import annotations

import contextlib
import io
import os
import stat
from pathlib import Path

import pytest
import trio
from conftest import keyed, keyed_hash
from holding import held, opened_texts
from test_forget import SETTINGS, STREAMS, chat, marker

from eva.cli.main import main
from eva.core.chain import check_stream
from eva.core.events import (
    LineWritten,
    MessageEdited,
    MessagePosted,
    SealedWithoutKeys,
    decode_event,
    decode_stored,
    use_opener,
)
from eva.core.keys import StreamId
from eva.core.sealing import (
    SealError,
    header,
    key_id,
    key_ids_of,
    open_blob,
    seal,
    sealing_key,
)
from eva.core.summarize import OfflineSummarizer
from eva.core.tables import Tables
from eva.demo.friends import friends_export
from eva.memory.build import Memory
from eva.store import seal_in_place as seal_in_place_module
from eva.store.event_store import EventStore, read_line, read_message
from eva.store.key_binding import bind, ring_of, seals_at_rest
from eva.store.key_store import KeyStore, KeyStoreError, open_key_store
from eva.store.lmdb_kv import open_backend
from eva.store.person_keys import PEOPLE_DIR, PersonKeys
from eva.store.replay import replay_stream

STREAM = StreamId(41, 42)
ANN, BO = 1001, 1002
SECRET_WORDS = ("zqmarmaladez", "zqquixoticz", "zqlanternz", "zqAnnettez", "zqBorisz")


@pytest.fixture
def key_store(tmp_path: Path) -> KeyStore:
    with contextlib.redirect_stderr(io.StringIO()):
        made = open_key_store(tmp_path / "keys", create=True)
    assert made is not None
    return made


def posted(index: int, author: int, name: str, content: str) -> MessagePosted:
    return MessagePosted(
        at_ms=1_700_000_000_000 + index, index=index, message_id=500 + index,
        author_id=author, author_name=name, content=content, attachments=("zqmap.png",),
    )


def lines() -> list[LineWritten]:
    """A leaf line of each message, then the line over both: it credits Ann and Bo."""
    def line(start: int, size: int, text: str, authors: tuple[int, ...]) -> LineWritten:
        return LineWritten(
            at_ms=1_700_000_000_009, start=start, size=size, text=text, first_ms=1, last_ms=2,
            authors=authors,
        )

    return [line(0, 1, "zqAnnettez eats", (ANN,)), line(1, 1, "zqBorisz plans", (BO,)),
            line(0, 2, "zqAnnettez and zqBorisz talk", (ANN, BO))]


def sealed_store(data: Path, key_store: KeyStore) -> EventStore:
    store = EventStore(open_backend(data))
    bind(store, key_store, write=True, say=None)
    return store


def raw_events(store: EventStore) -> list[bytes]:
    return [bytes(data) for _, data in store.raw_events(STREAM)]


def test_a_blob_opens_with_all_of_its_keys_and_with_no_fewer() -> None:
    keys = [os.urandom(32) for _ in range(3)]
    ids = (b"tag1" + b"a" * 6, b"tag1" + b"b" * 6, b"tag1" + b"c" * 6)
    nonce = os.urandom(12)
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    blob = seal(ids, AESGCM(sealing_key(keys)), nonce, b"the fields", b"line.written")
    assert key_ids_of(blob) == ids and b"the fields" not in blob
    assert open_blob(blob, lambda _: AESGCM(sealing_key(keys)), b"line.written") == b"the fields"
    for missing in range(3):  # any one key lost (here: replaced) and the blob is lost
        others = [key if at != missing else os.urandom(32) for at, key in enumerate(keys)]
        with pytest.raises(SealError):
            open_blob(blob, lambda _, o=others: AESGCM(sealing_key(o)), b"line.written")
    with pytest.raises(SealError):  # bound to the kind of event it belongs to
        open_blob(blob, lambda _: AESGCM(sealing_key(keys)), b"message.posted")
    flipped = blob[:-1] + bytes([blob[-1] ^ 1])
    with pytest.raises(SealError):
        open_blob(flipped, lambda _: AESGCM(sealing_key(keys)), b"line.written")
    with pytest.raises(SealError):
        key_ids_of(b"\x09garbage")


def test_people_keys_are_made_once_kept_on_disk_and_destroyed_for_good(
    key_store: KeyStore,
) -> None:
    people = PersonKeys(key_store.path, key_store.master)
    ids = [key_id(b"tag1", "ann"), key_id(b"tag1", "bo"), key_id(b"tag2", "ann")]
    made = people.make(ids)
    assert all(made[key] is not None for key in ids) and len(set(made.values())) == 3
    # another process (a fresh reader) finds the same keys; a second make changes nothing
    again = PersonKeys(key_store.path, key_store.master)
    assert again.find(ids) == made and again.make(ids) == made
    files = sorted((key_store.path / PEOPLE_DIR).glob("*.keys"))
    assert [path.name for path in files] == [f"{b'tag1'.hex()}.keys", f"{b'tag2'.hex()}.keys"]
    assert all(stat.S_IMODE(path.stat().st_mode) == 0o600 for path in files)
    ann_key = made[ids[0]]
    assert ann_key is not None and all(ann_key not in path.read_bytes() for path in files)

    assert people.destroy([ids[0]]) == 1
    assert again.find(ids) == {ids[0]: None, ids[1]: made[ids[1]], ids[2]: made[ids[2]]}
    assert again.make([ids[0]]) == {ids[0]: None}  # never made again under that id
    assert people.destroy_server(b"tag1") == 1
    assert PersonKeys(key_store.path, key_store.master).find(ids[:2]) == {
        ids[0]: None, ids[1]: None,
    }
    # with another master key the store's keys do not open
    other = PersonKeys(key_store.path, os.urandom(32))
    with pytest.raises(KeyStoreError, match="does not open with this master key"):
        other.find([ids[2]])


def test_a_sealed_directory_stores_no_word_or_name_and_reads_back_whole(
    tmp_path: Path, key_store: KeyStore
) -> None:
    store = sealed_store(tmp_path / "data", key_store)
    assert seals_at_rest(store)
    events = [
        posted(0, ANN, "zqAnnettez", "zqmarmaladez for breakfast"),
        posted(1, BO, "zqBorisz", "a zqquixoticz plan"),
        MessageEdited(at_ms=1_700_000_000_005, index=0, message_id=500, content="zqlanternz"),
    ]
    store.append(STREAM, events)
    store.append(STREAM, lines())
    line = lines()[2]
    for data in raw_events(store):
        assert not any(word.encode() in data for word in SECRET_WORDS)
        assert str(ANN).encode() not in data
        stored = decode_stored(data)
        if isinstance(stored, MessagePosted):  # the skeleton: no author, no words
            assert (stored.author_id, stored.author_name, stored.content) == (0, "", "")
            assert stored.sealed and stored.attachments == ()
    with store.backend.reading() as tables:
        first, second = read_message(tables, STREAM, 0), read_message(tables, STREAM, 1)
        made = read_line(tables, STREAM, 0, 2)
    assert first is not None and second is not None and made is not None
    assert first.posted == events[0] and first.content == "zqlanternz"
    assert second.posted == events[1]
    assert made == line


def test_a_destroyed_key_leaves_its_words_and_every_line_it_sealed_blank(
    tmp_path: Path, key_store: KeyStore
) -> None:
    store = sealed_store(tmp_path / "data", key_store)
    store.append(
        STREAM,
        [posted(0, ANN, "zqAnnettez", "zqmarmaladez"), posted(1, BO, "zqBorisz", "zqquixoticz")],
    )
    store.append(STREAM, lines())
    ring = ring_of(key_store)
    ann_ids = ring.ids_of(STREAM.guild_id, ring.hashes.recorded(ANN))
    assert len(ann_ids) == 1
    ring.people.destroy(ann_ids)
    ring.forget_ciphers()
    with store.backend.reading() as tables:
        first, second = read_message(tables, STREAM, 0), read_message(tables, STREAM, 1)
        line = read_line(tables, STREAM, 0, 2)
        bo_line = read_line(tables, STREAM, 1, 1)
    assert first is not None and (first.posted.author_id, first.content) == (0, "")
    assert first.posted.author_name == "" and first.attachments == ()
    assert second is not None and second.content == "zqquixoticz"  # Bo's keys are there
    assert line is not None and (line.text, line.authors) == ("", ())
    assert bo_line is not None and bo_line.text == "zqBorisz plans"
    # Ann writes again: a key of the next generation, and her new words read back
    store.append(STREAM, [posted(2, ANN, "zqAnnettez", "back again")])
    with store.backend.reading() as tables:
        third = read_message(tables, STREAM, 2)
    assert third is not None and third.content == "back again"
    assert len(ring.ids_of(STREAM.guild_id, ring.hashes.recorded(ANN))) == 2


def test_sealed_events_without_their_keys_are_an_error_that_names_the_key_store(
    tmp_path: Path, key_store: KeyStore
) -> None:
    store = sealed_store(tmp_path / "data", key_store)
    store.append(STREAM, [posted(0, ANN, "zqAnnettez", "zqmarmaladez")])
    data = raw_events(store)[0]
    try:
        use_opener(None)
        with pytest.raises(SealedWithoutKeys, match="no key store is open"):
            decode_event(data)
        with contextlib.redirect_stderr(io.StringIO()):
            other = open_key_store(tmp_path / "other", create=True)
        assert other is not None
        use_opener(ring_of(other).open)
        with pytest.raises(SealedWithoutKeys, match=f"key store {other.id} at .* does not hold"):
            decode_event(data)
    finally:
        bind(store, key_store, write=False)
    assert decode_event(data) == posted(0, ANN, "zqAnnettez", "zqmarmaladez")


def test_a_directory_written_before_is_sealed_in_place_even_when_cut_short(
    tmp_path: Path, key_store: KeyStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = EventStore(open_backend(tmp_path / "data"))  # bound to no key store: in the clear
    events = [posted(index, (ANN, BO)[index % 2], "zqAnnettez", f"zqmarmaladez {index}")
              for index in range(7)]
    store.append(STREAM, events[:5])
    store.append(STREAM, lines()[:2])
    store.append(StreamId(41, 43), [posted(0, BO, "zqBorisz", "zqmarmaladez too")])
    assert all(b"zqmarmaladez" in data for data in raw_events(store)[:5])

    # a run cut short after two chunks of two events: the rest of the log is sealed later
    monkeypatch.setattr(seal_in_place_module, "CHUNK_EVENTS", 2)
    real = seal_in_place_module._seal_chunk
    chunks: list[int] = []

    def cut_short(tables: Tables, **given: object) -> int:
        if len(chunks) == 2:
            raise OSError("the machine stopped")
        chunks.append(1)
        return real(tables, **given)  # type: ignore[arg-type]

    monkeypatch.setattr(seal_in_place_module, "_seal_chunk", cut_short)
    with pytest.raises(OSError, match="stopped"):
        bind(store, key_store, write=True, say=None)
    assert not seals_at_rest(store)
    monkeypatch.setattr(seal_in_place_module, "_seal_chunk", real)
    said: list[str] = []
    bind(store, key_store, write=True, say=said.append)
    assert said == ["eva: sealing the 8 events of 2 channels with people's keys (once, for "
                    "this data directory)"]
    assert seals_at_rest(store) and store.sealer is not None

    for stream in (STREAM, StreamId(41, 43)):
        with store.backend.reading() as tables:
            assert check_stream(tables, stream).ok
        assert not any(b"zqmarmaladez" in bytes(data) for _, data in store.raw_events(stream))
    with store.backend.reading() as tables:
        read = [read_message(tables, STREAM, index) for index in range(5)]
    assert [message.posted for message in read if message is not None] == events[:5]
    store.append(STREAM, [events[5]])  # what it writes now is sealed as it is written
    assert b"zqmarmaladez" not in raw_events(store)[-1]
    assert replay_stream(store, STREAM).ok


def test_a_line_that_credits_hundreds_of_people_is_sealed_for_all_of_them(
    key_store: KeyStore,
) -> None:
    ring = ring_of(key_store)
    authors = tuple(range(5000, 5300))  # a line high in the tree of a busy server
    line = LineWritten(
        at_ms=1, start=0, size=512, text="what everyone said", first_ms=1, last_ms=2,
        authors=authors,
    )
    (stored,) = ring.seal_events(STREAM.guild_id, [line], lambda _: 0)
    assert isinstance(stored, LineWritten) and stored.text == "" and stored.authors == ()
    assert len(key_ids_of(stored.sealed)) == 300
    assert ring.open(stored) == line
    ring.destroy_person(STREAM.guild_id, ring.hashes.recorded(authors[150]))  # any one of them
    lost = ring.open(stored)
    assert isinstance(lost, LineWritten) and (lost.text, lost.authors) == ("", ())
    with pytest.raises(SealError, match="one server"):
        header([key_id(b"tag1", "ann"), key_id(b"tag2", "bo")])


def test_a_backup_taken_before_a_forget_shows_none_of_their_words_and_a_restore_erases_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    live, backup = tmp_path / "live", tmp_path / "backup"
    store = keyed(EventStore(open_backend(live)))

    async def build() -> None:
        for stream in STREAMS:
            store.append(stream, chat(stream, 160))
            await Memory(store, stream, OfflineSummarizer(), SETTINGS).build(1_800_000_000_000)

    trio.run(build)
    open_backend(live).close()
    forgotten = [marker(202, index) for index in range(160)]
    others = [marker(101, index) for index in range(160)]
    assert main(["backup", str(backup), "--data", str(live)]) == 0
    theirs, everyone_else = opened_texts(backup), set(held(backup, others))
    assert [m for m in forgotten if m in theirs] and everyone_else
    assert main(["forget", "--user", "202", "--data", str(live)]) == 0
    # the backup, read with the live keys: none of their words, everyone else's all there
    opened = opened_texts(backup)
    assert not [m for m in forgotten if m in opened]
    assert set(held(backup, others)) == everyone_else
    capsys.readouterr()
    assert main(["recall", "9/1", marker(202, 4), "--data", str(backup)]) == 0
    shown = capsys.readouterr().out  # the question is echoed; no message of theirs matches
    assert shown.count(marker(202, 4)) == 1 and "\n>" not in shown
    assert shown.startswith("No messages match"), shown
    # restored over the live directory: forgotten again, their sealed words erased too
    assert main(["restore", str(backup), "--data", str(live), "--replace"]) == 0
    assert "forgot again 1 person(s)" in capsys.readouterr().out
    assert held(live, forgotten) == set()
    assert set(held(live, others)) == everyone_else
    ring = ring_of(open_key_store())
    gone = ring.ids_of(9, keyed_hash(202))
    data = (live / "data.mdb").read_bytes()
    assert gone and not any(key_id[4:] in data for key_id in gone)  # no blob sealed for them
    assert main(["replay", "--data", str(live), "--quiet"]) == 0


def test_a_key_store_that_cannot_keep_new_keys_stops_the_write_in_one_line_and_loses_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    store = keyed(EventStore(open_backend(data)))
    store.append(STREAM, [posted(0, ANN, "zqAnnettez", "zqmarmaladez")])
    open_backend(data).close()
    keys = open_key_store()
    assert keys is not None
    people = keys.path / PEOPLE_DIR
    moved = tmp_path / "people-aside"
    people.rename(moved)
    people.write_text("not a folder")  # nothing can be made in it
    try:
        export = tmp_path / "friends.json"
        export.write_bytes(friends_export(40))
        capsys.readouterr()
        assert main(["import", str(export), "--data", str(data)]) == 1
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "key store" in err and "Traceback" not in err
    finally:
        people.unlink()
        moved.rename(people)
    reading = keyed(EventStore(open_backend(data)), write=False)
    assert [meta.channel_id for meta in reading.streams()] == [STREAM.channel_id]
    with reading.backend.reading() as tables:
        kept = read_message(tables, STREAM, 0)
    assert kept is not None and kept.content == "zqmarmaladez"
    open_backend(data).close()
    assert main(["import", str(export), "--data", str(data)]) == 0  # with its keys: it goes in


def test_every_kind_seals_and_opens_whole(key_store: KeyStore) -> None:
    from eva.core.events import ChannelDescribed, ReplyWritten, ToolCalled, Usage, encode_event
    from eva.core.grounding import Detail, Grounding
    from eva.core.sealed_events import SEALABLE

    ring = ring_of(key_store)
    events = [
        ChannelDescribed(at_ms=1, guild_id=41, channel_id=42, guild_name="zqGuild",
                         channel_name="zqchannel"),
        posted(0, ANN, "zqAnnettez", "zqmarmaladez"),
        MessageEdited(at_ms=2, index=0, message_id=500, content="zqlanternz",
                      attachments=("zqmap.png",)),
        *lines()[:1],
        ToolCalled(at_ms=3, name="recall", arguments='{"query": "zqquixoticz"}', result_bytes=9),
        ReplyWritten(at_ms=4, model="m", usage=Usage(input_tokens=1), grounding=Grounding(
            details=(Detail(text="zqBorisz said so", kind="read"),), read=1)),
    ]
    assert {type(event) for event in events} == SEALABLE
    sealed = ring.seal_events(STREAM.guild_id, events, lambda _: ANN)
    for event, stored in zip(events, sealed, strict=True):
        stored_bytes = encode_event(stored)
        assert not any(word.encode() in stored_bytes for word in (*SECRET_WORDS, "zqGuild"))
        assert ring.open(stored) == event
