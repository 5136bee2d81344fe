# `eva forget` and `eva verify-erased` give clear answers, and do only what they say.
#
# Each test runs the commands in this process on a copy of one built data
# directory (guild 9 with two channels where Ann, Bo, Cy and Dee talk; guild 8
# with one channel where only Ann and Cy talk), and closes the data directory
# after every command so the next one opens the files as they are on disk.
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import trio
from conftest import keyed, keyed_hash
from test_forget import PEOPLE, SETTINGS, chat, marker, markers_in_files

from eva.cli.main import main as eva_main
from eva.core.events import MessageDeleted, MessagePosted
from eva.core.keys import StreamId
from eva.core.summarize import OfflineSummarizer
from eva.core.tables import Tables
from eva.memory.build import Memory
from eva.store.event_store import EventStore
from eva.store.key_binding import bind
from eva.store.key_store import open_key_store
from eva.store.lmdb_kv import open_backend

GUILD_9 = (StreamId(9, 1), StreamId(9, 2))
QUIET = StreamId(8, 1)  # only Ann (101) and Cy (303) talk here
MESSAGES = 80
BO = 202


def quiet_chat() -> list[MessagePosted]:
    return [
        MessagePosted(
            at_ms=1_700_000_000_000 + i * 60_000,
            index=i,
            message_id=800_000 + i,
            author_id=(101, 303)[i % 2],
            author_name=PEOPLE[(101, 303)[i % 2]],
            content=f"{marker((101, 303)[i % 2], 5000 + i)} quiet " + "word " * (i % 7),
        )
        for i in range(MESSAGES)
    ]


def posts_of(stream: StreamId) -> list[MessagePosted]:
    return quiet_chat() if stream == QUIET else chat(stream, MESSAGES)


def markers_of(person: int, streams: tuple[StreamId, ...] = (*GUILD_9, QUIET)) -> list[str]:
    return [
        post.content.split()[0]
        for stream in streams
        for post in posts_of(stream)
        if post.author_id == person
    ]


async def build(data: Path) -> None:
    store = EventStore(open_backend(data))
    bind(store, open_key_store(create=True), write=True)  # as the command that made it would
    try:
        for stream in (*GUILD_9, QUIET):
            store.append(stream, posts_of(stream))
            await Memory(store, stream, OfflineSummarizer(), SETTINGS).build(1_800_000_000_000)
    finally:
        close(data)


def close(data: Path) -> None:
    open_backend(data).close()


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    data = tmp_path_factory.mktemp("forget-cli") / "data"
    trio.run(build, data)
    return data


@pytest.fixture
def data(built: Path, tmp_path: Path) -> Path:
    copy = tmp_path / "data"
    shutil.copytree(built, copy)
    return copy


def eva(*argv: str, data: Path) -> int:
    try:
        return eva_main([*argv, "--data", str(data)])
    finally:
        close(data)


def positions(data: Path) -> dict[str, int]:
    try:
        return {f"{m.guild_id}/{m.channel_id}": m.position for m in store_of(data).streams()}
    finally:
        close(data)


def store_of(data: Path) -> EventStore:
    return keyed(EventStore(open_backend(data)))


def test_a_person_with_no_messages_in_the_guild_has_nothing_to_forget(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = positions(data)
    assert eva("forget", "--user", str(BO), "--guild", "8", data=data) == 0
    assert "user 202: no messages stored in the selected channels; nothing to forget" in (
        capsys.readouterr().out
    )
    assert positions(data) == before
    assert markers_in_files(data, markers_of(BO)) == set(markers_of(BO))


def test_an_unknown_id_has_nothing_to_forget_and_writes_nothing(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = positions(data)
    file_before = (data / "data.mdb").read_bytes()
    assert eva("forget", "--user", "987654321012345678", data=data) == 0
    out = capsys.readouterr().out
    assert "user 987654321012345678: no messages stored" in out and "nothing to forget" in out
    assert positions(data) == before
    assert (data / "data.mdb").read_bytes() == file_before


def test_eva_cannot_forget_herself(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = positions(data)
    assert eva("forget", "--user", "555", "--eva-id", "555", data=data) == 1
    err = capsys.readouterr().err
    assert err.startswith("eva forget: that is Eva's own id: Eva cannot forget herself")
    assert positions(data) == before


def test_forget_without_user_says_how(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert eva("forget", data=data) == 1
    assert "say whom to forget with --user ID" in capsys.readouterr().err


def test_forget_of_a_bad_id_says_what_an_id_is(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = positions(data)
    for bad in ("0", "-3"):
        with pytest.raises(SystemExit) as usage:
            eva("forget", "--user", bad, data=data)
        assert usage.value.code == 2
        assert f"{bad} is no Discord user id (a positive number)" in capsys.readouterr().err
    assert eva("forget", data=data) == 1
    assert "Copy User ID" in capsys.readouterr().err
    assert positions(data) == before


def test_forget_of_a_missing_data_directory_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert eva_main(["forget", "--user", "1", "--data", str(tmp_path / "nowhere")]) == 1
    assert "no Eva data directory at" in capsys.readouterr().err


def test_forgetting_twice_is_harmless_and_says_nothing_to_forget(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert eva("forget", "--user", str(BO), data=data) == 0
    first = capsys.readouterr().out
    erased = len(markers_of(BO))
    assert f"forgot person {keyed_hash(BO)} in 2 channels: {erased} messages erased" in first
    assert ": 0 found" in first
    after_first = positions(data)
    assert eva("forget", "--user", str(BO), data=data) == 0
    assert "user 202: no messages stored in the selected channels; nothing to forget" in (
        capsys.readouterr().out
    )
    assert positions(data) == after_first
    assert markers_in_files(data, markers_of(BO)) == set()


def test_forget_json_is_one_object_with_the_report(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert eva("forget", "--user", str(BO), "--json", data=data) == 0
    out = capsys.readouterr().out
    assert out.count("\n") == 1
    (report,) = json.loads(out)["forgets"]
    assert report["person_hash"] == keyed_hash(BO)
    assert report["channels"] == ["9/1", "9/2"]
    assert report["messages_erased"] == len(markers_of(BO))
    assert report["lines_remade"] > report["messages_erased"]
    # Both channels of guild 9 hold the same texts; each distinct text is checked once.
    assert report["texts_checked"] >= report["messages_erased"] // 2
    assert report["leftover_hits"] == 0
    assert 0 < report["data_bytes_after"] < report["data_bytes_before"]
    assert eva("forget", "--user", "987654321", "--json", data=data) == 0
    (nothing,) = json.loads(capsys.readouterr().out)["forgets"]
    assert nothing["channels"] == [] and nothing["messages_erased"] == 0


def test_resume_with_nothing_pending_says_so(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert eva("forget", "--resume", data=data) == 0
    assert capsys.readouterr().out == "no forget was pending\n"


def test_verify_erased_exits_1_when_a_text_is_found_and_0_when_none(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    kept = chat(GUILD_9[0], MESSAGES)[3].content
    bos = [p.content for p in chat(GUILD_9[0], MESSAGES) if p.author_id == BO]
    texts = tmp_path / "texts.txt"
    # a kept message, a text nobody wrote, and a name too short to tell anyone apart
    texts.write_text(f"{kept}\nnever written by anyone zq\nCy\n", encoding="utf-8")
    assert eva("verify-erased", "--texts", str(texts), "--every-text", data=data) == 1
    out = capsys.readouterr().out
    assert "3 texts checked in" in out and "FOUND" in out and "(2 distinct texts)" in out
    # by a forget's rule: a text a kept message holds, or too short, proves nothing
    assert eva("verify-erased", "--texts", str(texts), data=data) == 0
    out = capsys.readouterr().out
    assert out.startswith("2 left out (1 under 8 bytes, too short to tell anyone apart; 1 that ")
    assert "1 texts checked in" in out and "none found" in out

    texts.write_text("never written by anyone zq\n", encoding="utf-8")
    assert eva("verify-erased", "--texts", str(texts), "--json", data=data) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["texts"] == 1 and report["hits"] == 0 and report["files"] >= 2

    texts.write_text("\n".join(bos) + "\n", encoding="utf-8")
    # before the forget, Bo's messages are kept: only every text given finds them
    assert eva("verify-erased", "--texts", str(texts), "--every-text", data=data) == 1
    capsys.readouterr()
    assert eva("forget", "--user", str(BO), data=data) == 0
    assert eva("verify-erased", "--texts", str(texts), data=data) == 0
    assert "none found" in capsys.readouterr().out


def test_verify_erased_without_its_inputs_says_what_is_missing(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert eva("verify-erased", "--texts", str(tmp_path / "absent.txt"), data=data) == 1
    assert "no file at" in capsys.readouterr().err
    texts = tmp_path / "texts.txt"
    texts.write_bytes(b"\xff\xfe not utf-8\n")
    assert eva("verify-erased", "--texts", str(texts), data=data) == 1
    assert "is not UTF-8 text" in capsys.readouterr().err


def test_a_forget_purges_deleted_messages_only_in_the_channels_it_touches(data: Path) -> None:
    """A message deleted in Discord leaves the files at the next forget that touches its channel.

    In a channel the forget does not touch (the person never wrote there),
    nothing is rewritten: the deleted text stays in the log until a purge
    reaches that channel (the bot's delayed purge, or a later forget there).
    Both channels of guild 9 hold the same texts, so the same message is
    deleted in both.
    """
    store = store_of(data)
    touched = chat(GUILD_9[0], MESSAGES)[1]
    untouched = quiet_chat()[2]
    assert touched.author_id != BO and untouched.author_id != BO
    deletions = [(stream, touched.index, touched.message_id + 100_000 * i) for i, stream in
                 enumerate(GUILD_9)]  # fmt: skip
    deletions.append((QUIET, untouched.index, untouched.message_id))
    for stream, index, message_id in deletions:
        store.append(stream, [MessageDeleted(at_ms=1, index=index, message_id=message_id)])
    close(data)
    deleted = [touched.content.split()[0], untouched.content.split()[0]]
    assert markers_in_files(data, deleted) == set(deleted)

    assert eva("forget", "--user", str(BO), data=data) == 0

    assert markers_in_files(data, deleted) == {untouched.content.split()[0]}
    store = store_of(data)
    try:
        for stream in GUILD_9:
            message = store.message(stream, touched.index)
            assert message is not None and message.deleted and message.content == ""
            assert message.posted.author_name == ""
        quiet = store.meta(QUIET)
        assert quiet is not None and quiet.stale > 0  # its lines wait to be made again
    finally:
        close(data)
    kept = [m for m in markers_of(101) if m not in deleted]
    assert markers_in_files(data, kept) == set(kept)


def test_compaction_leaves_no_key_of_a_deleted_entry(tmp_path: Path) -> None:
    """Deleted keys leave the file too, not only values (the recall index keys hold words).

    Enough keys that the table has branch pages, whose separator keys LMDB's
    own compacting copy would keep after the entries are deleted.
    """
    backend = open_backend(tmp_path)
    words = [f"secret{n:05d}word" for n in range(4000)]

    def put(tables: Tables) -> None:
        for word in words:
            tables.put("postings", word.encode(), b"x" * 40)

    def delete(tables: Tables) -> None:
        for word in words[::2]:
            tables.delete("postings", word.encode())

    try:
        backend.write(put)
        backend.write(delete)
        backend.compact()
        with backend.reading() as tables:
            assert len(list(tables.scan("postings", b"", b"\xff"))) == len(words) // 2
    finally:
        backend.close()
    assert markers_in_files(tmp_path, words[::2]) == set()
    assert markers_in_files(tmp_path, words[1::2]) == set(words[1::2])


def test_forget_erases_the_persons_name_from_the_recall_index(data: Path) -> None:
    # The recall index holds each message's author name words (eva.core.terms.author_words);
    # once a person's messages are gone, so is every trace of their name there.
    assert markers_in_files(data, ["0by0bo", "0by0ann"]) == {"0by0bo", "0by0ann"}
    assert eva("forget", "--user", str(BO), data=data) == 0
    assert markers_in_files(data, ["0by0bo", "0by0ann"]) == {"0by0ann"}


def test_words_found_in_a_foreign_file_keep_the_forget_pending_until_the_file_is_gone(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The log no longer holds the words once a check has failed, so a resumed forget
    # cannot look for them again: it waits, by name, for the file that held them.
    bo_posts = [p.content for s in GUILD_9 for p in posts_of(s) if p.author_id == BO]
    notes = data / "notes" / "kept.txt"
    notes.parent.mkdir()
    notes.write_text("copied out of the chat:\n" + bo_posts[3] + "\n")
    capsys.readouterr()
    assert eva("forget", "--user", str(BO), data=data) == 1
    failed = capsys.readouterr().err
    assert "ERASURE FAILED" in failed and str(notes) in failed
    assert positions_pending(data) == {str(s) for s in GUILD_9}

    assert eva("forget", "--resume", data=data) == 1  # the file is still there
    again = capsys.readouterr().err
    assert "earlier check found their words" in again and str(notes) in again
    assert eva("audit", "9/1", data=data) == 0
    audit = capsys.readouterr().out
    assert "not proven" in audit
    assert f"forget requested for person {keyed_hash(BO)} (operator)" in audit

    notes.unlink()
    assert eva("forget", "--resume", data=data) == 0
    done = capsys.readouterr().out
    assert "could not be looked for again" in done
    assert positions_pending(data) == set()
    assert markers_in_files(data, markers_of(BO, GUILD_9)) == set()


def positions_pending(data: Path) -> set[str]:
    try:
        return {
            f"{m.guild_id}/{m.channel_id}" for m in store_of(data).streams() if m.forgetting
        }
    finally:
        close(data)
