"""Forget me: a person's words leave every byte of the data directory; nobody else loses."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from holding import held

from eva.core.events import LineWritten, MessagePosted
from eva.core.forget import join_corpus, joined_from, person_hash
from eva.core.keys import StreamId
from eva.core.settings import KIB, MemorySettings
from eva.core.summarize import OfflineSummarizer
from eva.memory.build import Memory
from eva.memory.forget import ForgetReport, forget
from eva.memory.view import memory_text, recall
from eva.store import erasure
from eva.store.erasure import prove_erased, scan_files
from eva.store.event_store import Appended, EventStore
from eva.store.lmdb_kv import open_backend
from eva.store.replay import replay_stream

SETTINGS = MemorySettings(
    compress_at_bytes=4 * KIB,
    tail_keep_bytes=1 * KIB,
    overflow_tail_bytes=8 * KIB,
    row_high_bytes=6 * KIB,
    row_low_bytes=3 * KIB,
)
PEOPLE = {101: "Ann", 202: "Bo", 303: "Cy", 404: "Dee"}
STREAMS = (StreamId(9, 1), StreamId(9, 2))


def marker(person: int, number: int) -> str:
    return f"mk{person}x{number:04d}zq"


def chat(stream: StreamId, count: int) -> list[MessagePosted]:
    people = list(PEOPLE)
    posts = []
    for i in range(count):
        person = people[(i * 7 + i // 3) % len(people)]
        filler = "word " * (3 + i % 5) if i % 11 else "long " * 130  # some too long for a leaf
        posts.append(
            MessagePosted(
                at_ms=1_700_000_000_000 + i * 60_000,
                index=i,
                message_id=stream.channel_id * 100_000 + i,
                author_id=person,
                author_name=PEOPLE[person],
                content=f"{marker(person, i)} {filler}",
                attachments=(f"{marker(person, i)}.png",) if i % 13 == 0 else (),
            )
        )
    return posts


def markers_in_files(directory: Path, markers: list[str]) -> set[str]:
    """The markers the directory still holds: in its files, or in its log opened."""
    return held(directory, markers)


async def built(tmp_path: Path) -> tuple[EventStore, dict[StreamId, list[MessagePosted]]]:
    store = EventStore(open_backend(tmp_path))
    posts = {stream: chat(stream, 160) for stream in STREAMS}
    for stream in STREAMS:
        store.append(stream, posts[stream])
        await Memory(store, stream, OfflineSummarizer(), SETTINGS).build(1_800_000_000_000)
    return store, posts


async def forget_from(
    store: EventStore, directory: Path, person: int, streams: Sequence[StreamId]
) -> ForgetReport:
    """Forget `person` in `streams`, as the command does, with the offline summarizer."""

    async def append(stream: StreamId, events: list) -> Appended:  # type: ignore[type-arg]
        return store.append(stream, events)

    return await forget(
        store,
        directory,
        person_hash(person),
        streams,
        "self",
        OfflineSummarizer(),
        append,
        SETTINGS,
        1_800_000_100_000,
    )


async def test_forgetting_one_person_leaves_no_byte_of_their_words(tmp_path: Path) -> None:
    store, posts = await built(tmp_path)
    everyone = {
        p: [marker(p, m.index) for s in STREAMS for m in posts[s] if m.author_id == p]
        for p in PEOPLE
    }
    lines = [e for s in STREAMS for _, e in store.events(s) if isinstance(e, LineWritten)]
    assert {line.how for line in lines} == {"verbatim", "glue", "model"}
    # The test can fail: before the forget, Bo's markers are in the raw files.
    assert markers_in_files(tmp_path, everyone[202]) == set(everyone[202])

    report = await forget_from(store, tmp_path, 202, STREAMS)
    assert report.messages_erased == sum(len(everyone[202]) for _ in [0])
    assert report.lines_remade > report.messages_erased
    assert report.leftover_hits == 0
    assert report.texts_checked > 0
    assert report.data_bytes_after < report.data_bytes_before
    assert markers_in_files(tmp_path, everyone[202]) == set()
    for person in (101, 303, 404):
        assert markers_in_files(tmp_path, everyone[person]) == set(everyone[person])
    for stream in STREAMS:
        assert replay_stream(store, stream).ok
        meta = store.meta(stream)
        assert meta is not None
        assert meta.stale == 0 and meta.forgetting == []
        for post in posts[stream]:
            message = store.message(stream, post.index)
            assert message is not None
            assert message.deleted == (post.author_id == 202)
            if post.author_id != 202:
                assert message.content == post.content
        block = memory_text(store, stream, SETTINGS)
        assert "mk202x" not in block and "Bo:" not in block
        assert "mk101x" in block or "Ann" in block
        assert recall(store, stream, marker(202, 0), SETTINGS).total == 0
        kept = recall(store, stream, marker(101, posts[stream][0].index), SETTINGS)
        assert kept.total >= 0


async def test_forget_is_harmless_twice_and_for_strangers(tmp_path: Path) -> None:
    store, _ = await built(tmp_path)

    async def append(stream: StreamId, events: list) -> Appended:  # type: ignore[type-arg]
        return store.append(stream, events)

    first = await forget(
        store, tmp_path, person_hash(303), STREAMS, "self", OfflineSummarizer(), append, SETTINGS, 1
    )
    assert first.messages_erased > 0
    positions = [store.meta(s).position for s in STREAMS]  # type: ignore[union-attr]
    again = await forget(
        store, tmp_path, person_hash(303), STREAMS, "self", OfflineSummarizer(), append, SETTINGS, 2
    )
    assert again.messages_erased == 0 and again.channels == []
    assert [store.meta(s).position for s in STREAMS] == positions  # type: ignore[union-attr]
    stranger = await forget(
        store, tmp_path, person_hash(999), STREAMS, "self", OfflineSummarizer(), append, SETTINGS, 3
    )
    assert stranger.channels == [] and stranger.messages_erased == 0


def test_person_hash_is_stable_and_tells_people_apart() -> None:
    assert person_hash(202) == person_hash(202)
    assert person_hash(202) != person_hash(203)
    assert len(person_hash(202)) == 24
    int(person_hash(202), 16)


def test_a_text_read_across_joins_of_surviving_texts_is_told_apart() -> None:
    corpus = join_corpus(
        ["So its  open source", "?", "see https://x.info/explorers.php", "I guess so"]
    )
    assert joined_from("open source ?", corpus)  # an end, then a whole text
    assert joined_from("php I guess", corpus)  # an end, then a start
    assert joined_from("source ? I guess", corpus)  # an end, a whole text, a start
    assert not joined_from("open source !", corpus)
    assert not joined_from("open source I said", corpus)  # nobody began with "I said"
    assert not joined_from("opensource", corpus)  # no space, nothing joined


def said(index: int, who: int, text: str) -> MessagePosted:
    return MessagePosted(
        at_ms=1_700_000_000_000 + index * 60_000,
        index=index,
        message_id=7000 + index,
        author_id=who,
        author_name=PEOPLE[who],
        content=text,
    )


async def test_words_of_others_that_read_as_a_forgotten_text_do_not_fail_the_forget(
    tmp_path: Path,
) -> None:
    # Ann says "So its open source", then "?"; Bo once said "open source ?". A line
    # that keeps Ann's two utterances joins them: "Ann: So its open source ?".
    stream = STREAMS[0]
    posts = []
    for i in range(64):
        if i in (20, 21):
            posts.append(said(i, 101, "So its open source" if i == 20 else "?"))
        elif i == 40:
            posts.append(said(i, 202, "open source ?"))
        else:
            posts.append(said(i, 303 + 101 * (i % 2), f"{i} about the wallets and the DEX " * 4))
    store = EventStore(open_backend(tmp_path))
    store.append(stream, posts)
    await Memory(store, stream, OfflineSummarizer(), SETTINGS).build(1_800_000_000_000)
    assert any(
        "Ann: So its open source ?" in event.text
        for _, event in store.events(stream)
        if isinstance(event, LineWritten)
    )

    report = await forget_from(store, tmp_path, 202, [stream])
    assert report.messages_erased == 1 and report.leftover_hits == 0
    assert markers_in_files(tmp_path, ["open source ?"]) == {"open source ?"}  # Ann's line
    message = store.message(stream, 40)
    assert message is not None and message.deleted


def test_a_forgotten_text_left_in_a_file_is_found_unless_others_words_make_it(
    tmp_path: Path,
) -> None:
    store = EventStore(open_backend(tmp_path / "data"))
    store.append(
        STREAMS[0],
        [said(0, 101, "So its open source"), said(1, 101, "?"), said(2, 303, "YYYEEEAAAAHHHH wow")],
    )
    left = b"Ann: So its open source ? / Cy: yyyeeeaaaahhhh / Bo: my own unique words"
    (tmp_path / "data" / "left.bin").write_bytes(left)
    forgotten = ["open source ?", "aaaahhhh", "my own unique words"]
    assert scan_files(tmp_path / "data", forgotten).hits == 3  # a scan alone finds all three
    report = prove_erased(store, tmp_path / "data", forgotten)
    assert (report.hits, report.texts_found) == (1, 1)  # Bo's own words only
    assert report.texts == 2  # "aaaahhhh" is in what the recall index keeps of Cy's words


@pytest.mark.parametrize("chunk", [1, 2, 7, 13, 1 << 20])
def test_a_scan_finds_texts_across_the_chunks_a_file_is_read_in_once_each(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(erasure, "SCAN_CHUNK", chunk)
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "a").write_bytes("..marigold..ferry at noon..héllo wörld..marigold".encode())
    (folder / "b").write_bytes(b"marigoldmarigold ololo")
    texts = ["marigold", "ferry at noon", "héllo wörld", "olo", "absent"]
    report = scan_files(folder, texts)

    def occurrences(text: str, data: bytes) -> int:
        wanted = text.encode()
        return sum(data.startswith(wanted, at) for at in range(len(data)))

    expected = {
        at: times
        for at, text in enumerate(texts)
        if (times := sum(occurrences(text, f.read_bytes()) for f in folder.iterdir()))
    }
    assert dict(report.found) == expected == {0: 4, 1: 1, 2: 1, 3: 2}
    assert report.hits == 8
    assert report.bytes == sum(len(f.read_bytes()) for f in folder.iterdir())


def test_a_text_of_a_megabyte_is_looked_for_in_pieces_and_found_by_any_of_them(
    tmp_path: Path,
) -> None:
    # The search automaton's builder overflows its stack on one string of some
    # 550,000 characters: a long text is looked for as pieces, in a child process
    # here so that a crash fails this test instead of ending the run.
    script = """
import sys
from pathlib import Path
from eva.core.forget import PIECE_CHARS, proof_texts
from eva.store.erasure import scan_files
folder = Path(sys.argv[1])
long = " ".join(f"w{n}" for n in range(150_000))  # about a megabyte, no piece repeated
(folder / "whole").write_text("<" + long + ">")
(folder / "part").write_text(long[300_000 : 300_000 + 2 * PIECE_CHARS])
report = scan_files(folder, ["absent text", long])
assert report.texts_found == 1 and report.files_found == ("part", "whole"), report
assert proof_texts([long], ["someone else"]) == [long]
print("ok")
"""
    folder = tmp_path / "files"
    folder.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", script, str(folder)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
