# Memory bounded by work: import, build and replay go through a channel a chunk at a time.
#
# Each streamed step must store exactly what the whole-at-once step stored (the
# same bytes in every table), give the same digests, survive being cut short,
# and hold no more than a chunk: the reader of an export is checked to read
# lazily and to hold about a chunk, with no timing in any assertion.
from __future__ import annotations

import hashlib
import json
import random
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from eva.cli import cmd_import
from eva.cli.cmd_import import import_bytes, import_file
from eva.cli.common import UserError
from eva.core import keys
from eva.core.address import Address, leaves
from eva.core.chain import check_stream
from eva.core.dce import export_events, parse_export
from eva.core.dce_stream import NotStreamable, export_chunks, outline_export
from eva.core.digest import RowsDigest, table_digest
from eva.core.events import decode_event, encode_event
from eva.core.keys import ALL_TABLES, CHAIN, StreamId, prefix_end, stream_prefix
from eva.core.replay import digest, projection_rows
from eva.core.row import sawtooth
from eva.core.settings import KIB, MemorySettings
from eva.core.summarize import OfflineSummarizer
from eva.core.tables import Tables
from eva.demo.friends import friends_export
from eva.memory import compress
from eva.memory.build import Memory
from eva.memory.publish import MeasuredLines
from eva.store import lmdb_kv
from eva.store import replay as replay_module
from eva.store.event_store import EventStore
from eva.store.key_binding import bind
from eva.store.key_store import open_key_store
from eva.store.replay import replay_stream

MESSAGES = 6000
CHUNK = 1000
NOW_MS = 1_760_000_000_000
SMALL = MemorySettings(
    compress_at_bytes=6 * KIB,
    tail_keep_bytes=2 * KIB,
    overflow_tail_bytes=12 * KIB,
    row_high_bytes=12 * KIB,
    row_low_bytes=6 * KIB,
    prompt_tail_max_bytes=16 * KIB,
)


@pytest.fixture(scope="module")
def export_bytes() -> bytes:
    return friends_export(MESSAGES)


@pytest.fixture
def export_file(tmp_path: Path, export_bytes: bytes) -> Path:
    path = tmp_path / "friends.json"
    path.write_bytes(export_bytes)
    return path


@pytest.fixture(autouse=True)
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cmd_import, "IMPORT_CHUNK", CHUNK)


@pytest.fixture(autouse=True)
def closed_backends() -> Iterator[None]:
    yield
    for backend in list(lmdb_kv._open_backends.values()):
        backend.close()


def every_table(data: Path) -> dict[str, str]:
    """A digest of every entry of every table of a data directory: the events as they read
    opened (each sealed with a nonce of its own, so their stored bytes differ from one
    write to the next), and the log's seals checked rather than compared, for the same
    reason."""
    backend = lmdb_kv.open_backend(data)
    found = {}
    with backend.reading() as tables:
        for table in ALL_TABLES:
            entries = list(tables.scan(table, b"", b"\xff" * 64))
            if table == "events":
                entries = [(key, encode_event(decode_event(value))) for key, value in entries]
            if table == CHAIN:
                streams = {keys.stream_of(key) for key, _ in entries}
                assert all(check_stream(tables, stream).ok for stream in streams)
                entries = [(key, b"") for key, _ in entries]
            found[table] = hashlib.sha256(msgspec.msgpack.encode(entries)).hexdigest()
    return found


def imported_in_one_transaction(data: Path, raw: bytes) -> None:
    """An import as it was made before it streamed: the export parsed whole, and every
    event appended in one transaction."""
    export = parse_export(raw)
    store = EventStore(lmdb_kv.open_backend(data))
    bind(store, open_key_store(create=True), write=True)  # as a command binds it
    store.append(export.stream, export_events(export, None, lambda _: None))


def test_a_streamed_import_stores_the_bytes_of_one_whole_transaction(
    tmp_path: Path, export_file: Path, export_bytes: bytes
) -> None:
    report = import_file(tmp_path / "streamed", export_file)
    imported_in_one_transaction(tmp_path / "whole", export_bytes)
    assert (report.added, report.already_present, report.repeated_in_export) == (MESSAGES, 0, 0)
    assert every_table(tmp_path / "streamed") == every_table(tmp_path / "whole")
    again = import_file(tmp_path / "streamed", export_file)
    assert (again.added, again.edited, again.already_present) == (0, 0, MESSAGES)


def test_an_import_cut_short_and_run_again_ends_as_one_run(
    tmp_path: Path, export_file: Path, export_bytes: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    append = EventStore.append
    calls = 0

    def cut_after_two(self: EventStore, stream: StreamId, events: object) -> object:
        nonlocal calls
        calls += 1
        if calls > 2:
            raise KeyboardInterrupt  # the process killed after two chunks
        return append(self, stream, events)  # type: ignore[arg-type]

    monkeypatch.setattr(EventStore, "append", cut_after_two)
    with pytest.raises(KeyboardInterrupt):
        import_file(tmp_path / "cut", export_file)
    monkeypatch.setattr(EventStore, "append", append)
    stored = EventStore(lmdb_kv.open_backend(tmp_path / "cut")).streams()[0]
    assert stored.messages == 2 * CHUNK  # each chunk whole, nothing of the third
    report = import_file(tmp_path / "cut", export_file)
    assert (report.added, report.already_present) == (MESSAGES - 2 * CHUNK, 2 * CHUNK)
    imported_in_one_transaction(tmp_path / "whole", export_bytes)
    assert every_table(tmp_path / "cut") == every_table(tmp_path / "whole")


def blocks_of(data: bytes, size: int, taken: list[int] | None = None) -> Iterator[bytes]:
    for start in range(0, len(data), size):
        if taken is not None:
            taken.append(start + size)
        yield data[start : start + size]


def test_the_outline_keeps_to_its_chunk_size_and_finds_every_message(export_bytes: bytes) -> None:
    outline = outline_export(blocks_of(export_bytes, 4096), 700)
    whole = parse_export(export_bytes)
    assert outline.messages == MESSAGES
    assert outline.head.guild == whole.guild and outline.head.channel == whole.channel
    chunks = list(export_chunks(blocks_of(export_bytes, 4096), outline.chunks))
    assert [len(chunk) for chunk in chunks] == [700] * (MESSAGES // 700) + [MESSAGES % 700]
    assert tuple(m for chunk in chunks for m in chunk) == whole.messages


def test_reading_chunks_again_reads_lazily_and_holds_about_a_chunk(export_bytes: bytes) -> None:
    block = 16 * 1024
    outline = outline_export(blocks_of(export_bytes, block), 100)
    taken: list[int] = []
    reading = export_chunks(blocks_of(export_bytes, block, taken), outline.chunks)
    tracemalloc.start()
    try:
        for (_, end), chunk in zip(outline.chunks, reading, strict=True):
            assert taken[-1] < end + 2 * block  # read up to the chunk's end, not beyond
            del chunk
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    widest = max(end - start for start, end in outline.chunks)
    assert len(export_bytes) > 20 * (widest + block)
    assert peak < 8 * (widest + block)  # a chunk's bytes and messages, never the export


def exported(messages: list[dict[str, object]], extra: str = "") -> bytes:
    head = (
        '{"guild": {"id": "1", "name": "G"}, "channel": {"id": "2", "name": "c"}, '
        '"exportedAt": "2021-03-05T00:00:00+00:00", '
    )
    return (head + extra + f'"messages": {json.dumps(messages)}' + "}").encode()


def post(number: int, content: str, **fields: object) -> dict[str, object]:
    return {
        "id": str(100 + number),
        "timestamp": "2021-03-04T10:00:00+00:00",
        "content": content,
        "author": {"id": "5", "name": "ann"},
        **fields,
    }


def test_brackets_quotes_and_escapes_inside_strings_do_not_split_a_message() -> None:
    tricky = ['{"]},[', 'say \\"hi\\" }', "\\\\", "a}, {b", "東京 \u00e9 {[]}"]
    raw = exported([post(n, text) for n, text in enumerate(tricky)])
    outline = outline_export([raw[i : i + 7] for i in range(0, len(raw), 7)], 2)
    chunks = export_chunks([raw[i : i + 7] for i in range(0, len(raw), 7)], outline.chunks)
    assert tuple(m for chunk in chunks for m in chunk) == parse_export(raw).messages


@pytest.mark.parametrize("indent", [None, 0, 2])
@pytest.mark.parametrize("chunk", [1, 2, 3, 7])
def test_chunks_found_by_the_joint_between_messages_hold_exactly_the_messages(
    indent: int | None, chunk: int
) -> None:
    texts = ["plain", 'a}, {"id": "7"} b', "}\n  {", "}, {", "},{", "x"] * 4
    files = [{"id": "9", "fileName": "f}, {"}, {"id": "8", "fileName": "g"}]
    messages = [
        post(n, text, attachments=files) if n % 3 == 0 else post(n, text)
        for n, text in enumerate(texts)
    ]
    export = {"guild": {"id": "1", "name": "G"}, "channel": {"id": "2", "name": "c"}}
    raw = json.dumps({**export, "messages": messages}, indent=indent).encode()
    pieces = [raw[i : i + 64] for i in range(0, len(raw), 64)]
    outline = outline_export(pieces, chunk)
    assert outline.messages == len(texts)
    assert all(raw[end - 1 : end] == b"}" for _, end in outline.chunks)
    chunks = list(export_chunks(pieces, outline.chunks))
    assert all(0 < len(found) <= chunk for found in chunks)
    assert tuple(m for found in chunks for m in found) == parse_export(raw).messages


@pytest.mark.parametrize(
    "raw",
    [
        exported([post(0, "a")], extra='"messages": [], '),  # two lists of messages
        exported([post(0, "a", embeds=[json.loads("[" * 40 + "]" * 40)])]),  # deeper than followed
        exported([post(0, "a")]) + b" trailing",
        exported([post(0, "a")])[:-3],  # truncated
    ],
    ids=["two-lists", "deep", "trailing", "truncated"],
)
def test_what_the_splitter_cannot_follow_is_left_to_the_whole_parse(
    raw: bytes, tmp_path: Path
) -> None:
    with pytest.raises(NotStreamable):
        outline_export([raw])
    path = tmp_path / "odd.json"
    path.write_bytes(raw)

    def outcome(data: Path, streamed: bool) -> object:
        try:
            if streamed:
                return import_file(data, path).added
            return import_bytes(data, raw, path).added
        except UserError as error:
            return str(error)

    assert outcome(tmp_path / "streamed", True) == outcome(tmp_path / "whole", False)


def test_replay_gives_the_digests_of_the_whole_tables_and_finds_a_changed_entry(
    tmp_path: Path, export_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(replay_module, "REBUILD_BATCH", 333)
    monkeypatch.setattr(replay_module, "COMPARE_CHUNK", 100)
    import_file(tmp_path, export_file)
    store = EventStore(lmdb_kv.open_backend(tmp_path))
    stream = StreamId(store.streams()[0].guild_id, store.streams()[0].channel_id)
    with store.backend.reading() as tables:
        whole = digest(projection_rows(tables, stream))
    result = replay_stream(store, stream)
    assert result.ok and result.live_digest == result.rebuilt_digest == whole

    prefix = stream_prefix(stream)
    with store.backend.reading() as tables:
        key, value = next(iter(tables.scan("postings", prefix, prefix_end(prefix))))

    def change(tables: Tables) -> None:
        tables.put("postings", key, value + b"\x00")

    store.backend.write(change)
    changed = replay_stream(store, stream)
    assert changed.differing == ("postings",)
    assert changed.rebuilt_digest == whole
    with store.backend.reading() as tables:
        assert changed.live_digest == digest(projection_rows(tables, stream))


@pytest.mark.parametrize("count", [0, 1, 15, 16, 4097, 65535, 65536, 70001])
def test_a_digest_made_a_chunk_at_a_time_is_the_whole_tables(count: int) -> None:
    rows = [(n.to_bytes(4, "big"), bytes(n % 7)) for n in range(count)]
    streamed = RowsDigest()
    for start in range(0, count, 4096):
        streamed.update(rows[start : start + 4096])
    assert streamed.finish() == table_digest(rows)


async def test_a_build_in_small_chunks_writes_the_log_of_one_in_large_chunks(
    tmp_path: Path, export_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    logs = []
    for name, chunk in (("small", 37), ("large", 1 << 20)):
        monkeypatch.setattr(compress, "WORK_CHUNK", chunk)
        import_file(tmp_path / name, export_file)
        store = EventStore(lmdb_kv.open_backend(tmp_path / name))
        bind(store, open_key_store(create=True), write=True)
        meta = store.streams()[0]
        stream = StreamId(meta.guild_id, meta.channel_id)
        memory = Memory(store, stream, OfflineSummarizer(SMALL.line_limit), SMALL)
        report = await memory.build(NOW_MS)
        assert report.stats.merges_model and report.stats.merges_glue and report.publishes == 1
        assert replay_stream(store, stream).ok
        logs.append([decode_event(data) for _, data in store.raw_events(stream)])
    assert logs[0] == logs[1]
    assert every_table(tmp_path / "small") == every_table(tmp_path / "large")


def test_the_sawtooth_makes_the_same_row_without_recording_its_merges() -> None:
    rng = random.Random(5)
    row = leaves(0, 3000)
    sizes = {}

    def size(address: Address) -> int:
        return sizes.setdefault(address, rng.randint(20, 500))

    whole = sawtooth(row, size, lambda _: True, 12 * KIB, 6 * KIB)
    lean = sawtooth(row, size, lambda _: True, 12 * KIB, 6 * KIB, record_merges=False)
    assert lean.row == whole.row and lean.row_bytes == whole.row_bytes
    assert whole.merges and lean.merges == ()


def test_measured_lines_answer_as_a_dict_would() -> None:
    measured = MeasuredLines()
    known = {Address(0, 1): 5, Address(6, 2): 0, Address(1024, 512): 77, Address(3, 1): 9}
    for address, size in known.items():
        measured.put(address, size)
    for address in [*known, Address(1, 1), Address(0, 2), Address(4096, 4096), Address(8, 2)]:
        assert (address in measured) == (address in known)
        if address in known:
            assert measured.get(address) == known[address]
        else:
            with pytest.raises(KeyError):
                measured.get(address)
