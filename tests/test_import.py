# Importing DiscordChatExporter exports: what lands in the store, and what is refused.
#
# Exports are written by the tests as JSON (or gzip) files; every import goes
# into real LMDB in its own tmp_path, closed at the end so the per-process
# backend cache never leaks between tests. The shared sample is used in place
# when /work/shared/data is present and skipped cleanly when it is not.
from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from eva.cli.cmd_import import import_file
from eva.cli.common import UserError
from eva.cli.main import main
from eva.core.dce import ExportError, KnownMessage, export_events, parse_export
from eva.core.events import ChannelDescribed, MessageEdited, MessagePosted
from eva.core.keys import StreamId
from eva.core.state import StreamMeta
from eva.store import lmdb_kv
from eva.store.event_store import EventStore
from eva.store.replay import replay_stream

STREAM = StreamId(111, 222)
SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "komodo-talk-general.dce.json.gz"

Json = dict[str, Any]


def message(number: int, **fields: Any) -> Json:
    """A DCE message as the exporter writes it, with every usual field."""
    value: Json = {
        "id": str(900_000 + number),
        "type": "Default",
        "timestamp": f"2021-03-04T10:{number % 60:02d}:00.000+00:00",
        "timestampEdited": None,
        "callEndedTimestamp": None,
        "isPinned": False,
        "content": f"message number {number}",
        "author": {
            "id": "500",
            "name": "ann_k",
            "discriminator": "0001",
            "nickname": "Ann",
            "color": None,
            "isBot": False,
            "roles": [],
            "avatarUrl": None,
        },
        "attachments": [],
        "embeds": [],
        "stickers": [],
        "reactions": [],
        "mentions": [],
    }
    value.update(fields)
    return value


def export(messages: list[Json], *, guild: str = "Guild", channel: str = "general") -> Json:
    return {
        "guild": {"id": str(STREAM.guild_id), "name": guild, "iconUrl": None},
        "channel": {"id": str(STREAM.channel_id), "type": "GuildTextChat", "name": channel},
        "dateRange": {"after": None, "before": None},
        "exportedAt": "2021-03-05T00:00:00.000+00:00",
        "messages": messages,
        "messageCount": len(messages),
    }


def small_export() -> list[Json]:
    bob = {"id": "501", "name": "bob", "nickname": None, "isBot": False}
    bot = {"id": "502", "name": "helper", "isBot": True}
    return [
        message(0, timestamp="2021-03-04T12:00:00.250+02:00"),
        message(
            1,
            author=bob,
            timestamp="2021-03-04T05:31:00.000-05:30",
            content="",
            attachments=[
                {
                    "id": "1",
                    "url": "https://cdn/x/cat.png",
                    "fileName": "cat.png",
                    "fileSizeBytes": 9,
                },
                {"id": "2", "url": "https://cdn/x/notes.txt", "fileName": "notes.txt"},
            ],
        ),
        message(
            2,
            author=bot,
            timestamp="2021-03-04T11:02:00.000+00:00",
            timestampEdited="2021-03-04T11:05:30.500+00:00",
            content="replying",
            reference={"messageId": "900000", "channelId": "222", "guildId": "111"},
        ),
    ]


def write(path: Path, value: Json | bytes) -> Path:
    data = value if isinstance(value, bytes) else json.dumps(value, indent=2).encode()
    path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
    return path


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "data"
    yield path
    if (path / "data.mdb").exists():
        lmdb_kv.open_backend(path).close()


def store_at(path: Path) -> EventStore:
    return EventStore(lmdb_kv.open_backend(path))


def ms(text: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(text).timestamp() * 1000)


# -- a small export, end to end --------------------------------------------


def test_small_export_stores_authors_times_replies_and_attachments(
    tmp_path: Path, data_dir: Path
) -> None:
    report = import_file(data_dir, write(tmp_path / "e.json", export(small_export())))
    store = store_at(data_dir)

    assert (report.added, report.edited, report.already_present, report.messages) == (3, 0, 0, 3)
    assert report.authors == 3
    meta = store.meta(STREAM)
    assert meta is not None
    assert (meta.guild_name, meta.channel_name, meta.messages) == ("Guild", "general", 3)
    events = [event for _, event in store.events(STREAM)]
    assert isinstance(events[0], ChannelDescribed)
    assert events[0].at_ms == ms("2021-03-05T00:00:00+00:00")

    first, second, third = (store.message(STREAM, index) for index in range(3))
    assert first is not None
    assert second is not None
    assert third is not None
    assert first.posted.author_name == "Ann"  # the nickname wins
    assert first.posted.author_id == 500
    assert first.posted.message_id == 900_000
    assert first.posted.at_ms == ms("2021-03-04T10:00:00.250+00:00")
    assert first.posted.utc_offset_min == 120
    assert second.posted.author_name == "bob"  # no nickname: the name
    assert second.posted.utc_offset_min == -330
    assert second.posted.at_ms == ms("2021-03-04T11:01:00+00:00")
    assert second.content == ""
    assert second.attachments == ("cat.png", "notes.txt")
    assert third.posted.bot is True
    assert third.posted.reply_to == 900_000
    assert third.edited_at_ms == ms("2021-03-04T11:05:30.500+00:00")
    assert first.posted.reply_to is None
    assert first.edited_at_ms is None
    assert store.index_of(STREAM, 900_002) == 2
    assert (meta.first_ms, meta.last_ms) == (first.posted.at_ms, third.posted.at_ms)


def test_importing_the_same_export_twice_adds_nothing(tmp_path: Path, data_dir: Path) -> None:
    path = write(tmp_path / "e.json.gz", export(small_export()))
    import_file(data_dir, path)
    position = _position(data_dir)
    report = import_file(data_dir, path)
    assert (report.added, report.edited, report.already_present) == (0, 0, 3)
    assert _position(data_dir) == position


def test_a_new_message_and_a_changed_text_add_one_message_and_one_edit(
    tmp_path: Path, data_dir: Path
) -> None:
    import_file(data_dir, write(tmp_path / "v1.json", export(small_export())))
    later = small_export()
    later[0]["content"] = "message number 0, corrected"
    later[0]["timestampEdited"] = "2021-03-04T10:30:00.000+00:00"
    later.append(message(3, content="a new one"))
    report = import_file(data_dir, write(tmp_path / "v2.json", export(later)))

    assert (report.added, report.edited, report.already_present, report.messages) == (1, 1, 2, 4)
    store = store_at(data_dir)
    edited = store.message(STREAM, 0)
    assert edited is not None
    assert edited.content == "message number 0, corrected"
    assert edited.edited_at_ms == ms("2021-03-04T10:30:00+00:00")
    assert edited.posted.content == "message number 0"  # the log keeps the first text
    new = store.message(STREAM, 3)
    assert new is not None
    assert (new.content, new.posted.message_id) == ("a new one", 900_003)


def test_an_edit_with_no_edit_time_takes_the_message_time(tmp_path: Path, data_dir: Path) -> None:
    import_file(data_dir, write(tmp_path / "v1.json", export([message(0)])))
    import_file(data_dir, write(tmp_path / "v2.json", export([message(0, content="changed")])))
    edits = [e for _, e in store_at(data_dir).events(STREAM) if isinstance(e, MessageEdited)]
    assert [(e.index, e.content, e.at_ms) for e in edits] == [
        (0, "changed", ms("2021-03-04T10:00:00+00:00"))
    ]


def test_repeated_ids_in_one_export_keep_the_first(tmp_path: Path, data_dir: Path) -> None:
    messages = [message(0), message(1), message(0, content="the same id again"), message(2)]
    report = import_file(data_dir, write(tmp_path / "e.json", export(messages)))
    assert (report.added, report.repeated_in_export, report.messages) == (3, 1, 3)
    stored = store_at(data_dir).message(STREAM, 0)
    assert stored is not None
    assert stored.content == "message number 0"


def test_a_renamed_channel_is_described_again(tmp_path: Path, data_dir: Path) -> None:
    import_file(data_dir, write(tmp_path / "v1.json", export([message(0)])))
    report = import_file(
        data_dir, write(tmp_path / "v2.json", export([message(0)], channel="renamed"))
    )
    assert (report.added, report.channel_name) == (0, "renamed")
    described = [e for _, e in store_at(data_dir).events(STREAM) if isinstance(e, ChannelDescribed)]
    assert [e.channel_name for e in described] == ["general", "renamed"]


def test_export_events_leave_deleted_messages_deleted_and_skip_lookups_on_a_new_stream() -> None:
    parsed = parse_export(json.dumps(export([message(0, content="back?"), message(1)])).encode())
    asked: list[int] = []

    def known(message_id: int) -> KnownMessage | None:
        asked.append(message_id)
        return KnownMessage(0, "gone", (), deleted=True) if message_id == 900_000 else None

    meta = StreamMeta(
        guild_id=111,
        channel_id=222,
        messages=1,
        guild_name="Guild",
        channel_name="general",
        time_zone="Europe/Paris",
    )
    events = export_events(parsed, meta, known)
    assert asked == [900_000, 900_001]
    assert [(type(e), getattr(e, "index", None)) for e in events] == [(MessagePosted, 1)]

    renamed = StreamMeta(guild_id=111, channel_id=222, messages=1, time_zone="Europe/Paris")
    described = export_events(parsed, renamed, known)[0]
    assert isinstance(described, ChannelDescribed)
    assert described.time_zone == "Europe/Paris"

    asked.clear()
    fresh = export_events(parsed, None, known)
    assert asked == []
    assert [type(e) for e in fresh] == [ChannelDescribed, MessagePosted, MessagePosted]


# -- what imports whole ----------------------------------------------------


def test_a_one_megabyte_message_is_stored_whole(tmp_path: Path, data_dir: Path) -> None:
    big = "long line of chat " * 60_000
    assert len(big) > 1_000_000
    import_file(data_dir, write(tmp_path / "e.json", export([message(0), message(1, content=big)])))
    stored = store_at(data_dir).message(STREAM, 1)
    assert stored is not None
    assert stored.content == big


ODD_TEXTS = [
    "emoji 😀👩‍👩‍👧‍👦🏳️‍🌈",
    "RTL مرحبا بالعالم שלום",
    "combining e\u0301 a\u0308\u0323 Z\u0336\u0337",
    "zero width \u200b\u200c\u200d\u2060\ufeff",
    "control \u0000 \u0007 and a tab\t",
    "\U0010fffd private plane and \ufffd",
]


@pytest.mark.parametrize("escaped", [True, False], ids=["escaped", "raw-utf8"])
def test_odd_unicode_is_stored_exactly(tmp_path: Path, data_dir: Path, escaped: bool) -> None:
    messages = [
        message(i, content=text, author={"id": "9", "name": text})
        for i, text in enumerate(ODD_TEXTS)
    ]
    path = tmp_path / "e.json"
    path.write_bytes(json.dumps(export(messages), ensure_ascii=escaped).encode())
    import_file(data_dir, path)
    store = store_at(data_dir)
    for index, text in enumerate(ODD_TEXTS):
        stored = store.message(STREAM, index)
        assert stored is not None
        assert (stored.content, stored.posted.author_name) == (text, text)


# -- what is refused, leaving the store as it was --------------------------


def _position(data_dir: Path) -> int | None:
    if not (data_dir / "data.mdb").exists():
        return None
    meta = store_at(data_dir).meta(STREAM)
    return None if meta is None else meta.position


def _drop(path: str) -> Callable[[list[Json]], None]:
    def edit(messages: list[Json]) -> None:
        *parents, last = path.split(".")
        value: Any = messages[3]
        for part in parents:
            value = value[part]
        del value[last]

    return edit


def _set(path: str, new: Any) -> Callable[[list[Json]], None]:
    def edit(messages: list[Json]) -> None:
        *parents, last = path.split(".")
        value: Any = messages[3]
        for part in parents:
            value = value[part]
        value[last] = new

    return edit


def _replace(new: Any) -> Callable[[list[Json]], None]:
    def edit(messages: list[Json]) -> None:
        messages[3] = new

    return edit


REFUSED = [
    pytest.param(_replace(None), "message 3 is not a message object (it is null)", id="null"),
    pytest.param(_replace([1, 2]), "message 3 is not a message object (it is [1, 2])", id="list"),
    pytest.param(_drop("id"), "message 3: `id` is missing", id="missing-id"),
    pytest.param(_drop("timestamp"), "message 3 (id 900003): `timestamp` is missing", id="no-time"),
    pytest.param(_drop("content"), "message 3 (id 900003): `content` is missing", id="no-content"),
    pytest.param(
        _drop("author.id"), "message 3 (id 900003): `author.id` is missing", id="no-author"
    ),
    pytest.param(_drop("author.name"), "(id 900003): `author.name` is missing", id="no-name"),
    pytest.param(_set("id", 900003), "message 3: `id` has the wrong type", id="id-number"),
    pytest.param(_set("id", "12ab"), "message 3: `id` is not a Discord id", id="id-letters"),
    pytest.param(_set("id", "1" * 20), "message 3: `id` is not a Discord id", id="id-too-big"),
    pytest.param(_set("content", None), "`content` has the wrong type", id="content-null"),
    pytest.param(_set("content", ["a"]), "message 3 (id 900003): `content` has", id="content-list"),
    pytest.param(_set("author.isBot", "yes"), "`author.isBot` has the wrong type", id="bot-str"),
    pytest.param(_set("timestamp", "last tuesday"), "`timestamp` is not an ISO 8601", id="time"),
    pytest.param(
        _set("timestamp", "2021-03-04T10:00:00"), "`timestamp` has no UTC offset", id="time-naive"
    ),
    pytest.param(
        _set("timestampEdited", 5), "`timestampEdited` has the wrong type", id="edit-time"
    ),
    pytest.param(
        _set("reference", {"messageId": "x"}), "`reference.messageId` is not", id="reply-id"
    ),
    pytest.param(
        _set("attachments", [{"fileName": 3}]), "`attachments[0].fileName` has", id="attachment"
    ),
    pytest.param(
        _set("content", "a lone \ud800"),
        "message 3 (id 900003): `content` holds a lone UTF-16 surrogate",
        id="lone-surrogate-end",
    ),
    pytest.param(
        _set("author.name", "\udc00x"),
        "message 3 (id 900003): `author.name` holds a lone UTF-16 surrogate",
        id="lone-low-surrogate",
    ),
]


@pytest.mark.parametrize(("edit", "expected"), REFUSED)
def test_a_bad_message_is_refused_by_number_and_nothing_is_written(
    tmp_path: Path, data_dir: Path, edit: Callable[[list[Json]], None], expected: str
) -> None:
    messages = [message(i) for i in range(6)]
    edit(messages)
    path = write(tmp_path / "bad.json", export(messages))
    with pytest.raises(UserError) as refused:
        import_file(data_dir, path)
    assert expected in str(refused.value)
    assert str(refused.value).startswith(f"cannot import {path}: ")
    assert not data_dir.exists()  # refused before the store is opened


def test_a_bad_export_leaves_an_existing_stream_where_it_was(
    tmp_path: Path, data_dir: Path
) -> None:
    import_file(data_dir, write(tmp_path / "v1.json", export([message(i) for i in range(3)])))
    position = _position(data_dir)
    messages = [message(i) for i in range(6)]
    messages[5]["content"] = 42
    with pytest.raises(UserError, match="message 5 "):
        import_file(data_dir, write(tmp_path / "v2.json", export(messages)))
    assert _position(data_dir) == position == 4


def _truncated_in_message(number: int, messages: int = 8) -> bytes:
    data = json.dumps(export([message(i) for i in range(messages)]), indent=1).encode()
    return data[: data.index(f"message number {number}".encode()) + 3]


def test_truncated_json_says_how_many_messages_were_complete(
    tmp_path: Path, data_dir: Path
) -> None:
    path = write(tmp_path / "cut.json", _truncated_in_message(5))
    with pytest.raises(UserError, match=r"is truncated: it ends after 5 complete messages$"):
        import_file(data_dir, path)
    assert not data_dir.exists()


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        pytest.param(
            lambda d: d.replace(b'"message number 4"', b'"message number 4" oops'),
            r"malformed JSON at line \d+, byte \d+, after 4 complete messages",
            id="garbage",
        ),
        pytest.param(
            lambda d: d.replace(b'"message number 2"', b"NaN"),
            "after 2 complete messages: NaN is not JSON",
            id="nan",
        ),
        pytest.param(
            lambda d: d.replace(b"message number 6", b"message \xff\xfe 6"),
            r"not valid UTF-8 at byte \d+ \(line \d+\), in message 6",
            id="bad-utf8",
        ),
        pytest.param(lambda d: b"<html>not json</html>", "an HTML page", id="html"),
        pytest.param(lambda d: b"", "truncated: it ends after 0 complete messages", id="empty"),
        pytest.param(
            lambda d: d.replace(b'"channel"', b'"chanel"'),
            "the export has no `channel`",
            id="no-channel",
        ),
        pytest.param(lambda d: b"[1, 2]", "not a DiscordChatExporter JSON object", id="list"),
    ],
)
def test_malformed_json_is_refused_with_where_it_broke(
    tmp_path: Path, data_dir: Path, damage: Callable[[bytes], bytes], expected: str
) -> None:
    data = json.dumps(export([message(i) for i in range(8)]), indent=1).encode()
    with pytest.raises(UserError, match=expected):
        import_file(data_dir, write(tmp_path / "bad.json", damage(data)))
    assert not data_dir.exists()


@pytest.mark.parametrize(
    ("content", "kind"),
    [
        (b"AuthorID,Author,Date,Content,Attachments,Reactions\n1,Ann,2024,hi,,\n", "a CSV file"),
        (b"\xef\xbb\xbf<!DOCTYPE html>\n<html><head>", "an HTML page"),
        (b"PK\x03\x04\x14\x00\x00\x00", "a zip archive"),
        (b"==============================================\nGuild: g\nChannel: c\n", "plain text"),
    ],
)
def test_another_export_format_is_named_with_how_to_export_json(
    tmp_path: Path, data_dir: Path, content: bytes, kind: str
) -> None:
    with pytest.raises(UserError) as refused:
        import_file(data_dir, write(tmp_path / "chat.export", content))
    said = str(refused.value)
    assert f"the file is {kind}" in said and "not a JSON export" in said and "-f Json" in said
    assert not data_dir.exists()


def test_deeply_nested_json_is_refused_plainly(tmp_path: Path, data_dir: Path) -> None:
    value = export([message(0)])
    text = json.dumps(value).replace('"content": ', '"embeds": ' + "[" * 200_000 + "]" * 200_000
                                     + ', "content": ', 1)
    with pytest.raises(UserError, match="nests arrays or objects too deeply"):
        import_file(data_dir, write(tmp_path / "deep.json", text.encode()))
    assert not data_dir.exists()


def test_parse_export_raises_export_error_for_a_lone_surrogate_in_the_channel_name() -> None:
    value = export([message(0)], channel="bad \ud83d name")
    with pytest.raises(ExportError, match=r"the export's `channel.name` holds a lone UTF-16"):
        parse_export(json.dumps(value).encode())


def test_file_problems_are_user_errors(tmp_path: Path, data_dir: Path) -> None:
    with pytest.raises(UserError, match="no such file"):
        import_file(data_dir, tmp_path / "absent.json")
    fake = tmp_path / "plain.json.gz"
    fake.write_bytes(json.dumps(export([message(0)])).encode())
    with pytest.raises(UserError, match=r"is named \.gz but is not gzip data"):
        import_file(data_dir, fake)
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(gzip.compress(json.dumps(export([message(0)])).encode())[:-12])
    with pytest.raises(UserError, match="gzip data is truncated"):
        import_file(data_dir, cut)
    assert not data_dir.exists()
    # gzip data is read whatever the file is called
    unnamed = tmp_path / "export.json"
    unnamed.write_bytes(gzip.compress(json.dumps(export([message(0)])).encode()))
    assert import_file(data_dir, unnamed).added == 1


# -- the command line ------------------------------------------------------


def test_cli_prints_what_was_stored(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "e.json.gz", export(small_export()))
    assert main(["import", str(path), "--data", str(data_dir)]) == 0
    out = capsys.readouterr().out
    assert "#general (111/222)" in out
    lines = {
        line.split("  ")[1].strip(): line.split("  ")[-1].strip() for line in out.splitlines()[1:]
    }
    assert lines["messages added"] == "3"
    assert lines["edits recorded"] == "0"
    assert lines["messages now"] == "3"
    assert lines["first message"] == "2021-03-04T10:00:00.250+00:00"
    assert lines["last message"] == "2021-03-04T11:02:00.000+00:00"
    assert lines["authors in export"] == "3"
    assert str(data_dir) in lines["data directory"]


def test_cli_json_reports_one_object(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "e.json", export(small_export()))
    assert main(["import", str(path), "--data", str(data_dir), "--json", "--quiet"]) == 0
    assert main(["import", str(path), "--data", str(data_dir), "--json"]) == 0
    first, second = (json.loads(line) for line in capsys.readouterr().out.splitlines())
    assert (first["added"], first["edited"], first["already_present"]) == (3, 0, 0)
    assert (second["added"], second["already_present"], second["messages"]) == (0, 3, 3)
    assert first["stream"] == "111/222"
    assert (first["guild_id"], first["channel_id"]) == ("111", "222")
    assert (first["guild_name"], first["channel_name"]) == ("Guild", "general")
    assert first["first_at"] == "2021-03-04T10:00:00.250+00:00"
    assert first["authors"] == 3
    assert second["data_dir_bytes"] == sum(p.stat().st_size for p in data_dir.iterdir()) > 0


def test_cli_quiet_prints_nothing_and_errors_exit_1(
    tmp_path: Path, data_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "e.json", export(small_export()))
    assert main(["import", str(path), "--data", str(data_dir), "--quiet"]) == 0
    assert capsys.readouterr() == ("", "")
    bad = tmp_path / "bad.json"
    bad.write_bytes(_truncated_in_message(2))
    assert main(["import", str(bad), "--data", str(data_dir)]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"eva import: cannot import {bad}: the export is truncated: "
        "it ends after 2 complete messages\n"
    )
    assert main(["import", str(tmp_path / "nope.json"), "--data", str(data_dir)]) == 1
    assert "no such file" in capsys.readouterr().err


# -- the shared sample -----------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(not SAMPLE.exists(), reason="shared sample data is not present")
def test_the_shared_sample_imports_and_replays(data_dir: Path) -> None:
    report = import_file(data_dir, SAMPLE)
    assert (report.added, report.messages, report.authors) == (45_707, 45_707, 1_459)
    store = store_at(data_dir)
    stream = StreamId(int(report.guild_id), int(report.channel_id))
    result = replay_stream(store, stream)
    assert result.ok, result.differing
    assert result.events == 45_708  # the channel description, then every message
    again = import_file(data_dir, SAMPLE)
    assert (again.added, again.edited, again.already_present) == (0, 0, 45_707)


def test_an_export_on_standard_input_is_read_with_a_dash(tmp_path: Path) -> None:
    import os
    import subprocess
    import sys

    from eva.demo.friends import friends_export

    data = tmp_path / "data"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])}
    for raw in (friends_export(40), gzip.compress(friends_export(60))):
        done = subprocess.run(
            [sys.executable, "-m", "eva", "import", "-", "--data", str(data), "--json"],
            input=raw, capture_output=True, env=env, timeout=60, check=False,
        )
        assert done.returncode == 0, done.stderr
        report = json.loads(done.stdout)
        assert report["file"] == "standard input" and report["added"] > 0
    done = subprocess.run(
        [sys.executable, "-m", "eva", "import", "-", "--data", str(data)],
        input=b'{"guild": ', capture_output=True, env=env, timeout=60, check=False,
    )
    assert done.returncode == 1
    assert done.stderr.decode().startswith("eva import: cannot import standard input: ")
