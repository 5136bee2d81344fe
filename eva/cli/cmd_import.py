# `eva import`: store a DiscordChatExporter JSON export as a channel's events.
#
# The shell around eva.core.dce and eva.core.dce_stream: it reads the file a
# block at a time, asks the store what it already holds, and appends the new
# events a chunk of messages at a time, so that what it holds follows a chunk
# and not the export (an export of up to READ_ONCE_BYTES is held decoded
# instead of being read twice). A file that cannot be read or parsed is a UserError, and
# the data directory is only opened once the whole export is known to be good.
# Each chunk is a transaction of its own that leaves the store consistent: an
# import cut short keeps the chunks it stored, and the same import run again
# skips them and stores the rest, ending exactly where one run would have.
# Importing the same export twice adds nothing.
from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
import tempfile
import time
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, BinaryIO

from eva.cli.cmd_forget import finish_left_forgets, finish_left_purges
from eva.cli.common import (
    Progress,
    UserError,
    add_data_option,
    add_json_option,
    add_settings_option,
    load_live_settings,
    load_settings,
    open_store,
    print_json,
)
from eva.cli.forget_guild import finish_owed_erasures
from eva.core.channel_switch import keeps
from eva.core.dce import (
    ChannelExport,
    ExportError,
    ExportEvents,
    KnownMessage,
    Message,
    channel_described,
    parse_export,
    utc_ms,
)
from eva.core.dce_stream import NotStreamable, export_chunks, outline_export
from eva.core.events import AnyEvent, MessageEdited, MessagePosted
from eva.core.forget import Forgotten
from eva.core.keys import StreamId
from eva.core.projection import Rejected
from eva.core.settings import Listen
from eva.store.event_store import EventStore
from eva.store.opt_outs import opted_out
from eva.store.switches import read_switches

GZIP_MAGIC = b"\x1f\x8b"
READ_BLOCK = 1 << 20
IMPORT_CHUNK = 8192
"""Messages whose events are stored in one transaction."""
READ_ONCE_BYTES = 64 << 20
"""An export whose messages take at most this much JSON is held decoded from the read that
checks it, and read once (the shared sample, 28 MB, holds about 50 MB so); a longer one
is read again, a chunk at a time."""


@dataclass(frozen=True, slots=True)
class ImportReport:
    """What an import stored, and where the channel stands after it."""

    file: str
    stream: str
    guild_id: str
    guild_name: str
    channel_id: str
    channel_name: str
    added: int
    edited: int
    already_present: int
    skipped_forgotten: int
    """Messages of people who asked to be forgotten, from before they asked: never stored."""
    repeated_in_export: int
    messages: int
    first_ms: int | None
    last_ms: int | None
    authors: int
    data_dir: str
    data_dir_bytes: int
    seconds: float

    def to_json(self) -> dict[str, Any]:
        value = asdict(self)
        value["first_at"] = _iso(self.first_ms)
        value["last_at"] = _iso(self.last_ms)
        return value


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "import",
        help="import a DiscordChatExporter JSON export (.json or .json.gz)",
        description=(
            "Store the messages of a DiscordChatExporter JSON export in the channel's "
            "event log. Messages already stored are skipped, changed ones recorded as "
            "edits. The export is checked whole before anything is stored, then stored "
            f"{IMPORT_CHUNK} messages a transaction: an import cut short is finished by "
            "running it again. A forget a crash left pending is "
            "finished first (--settings: the memory settings its lines are made again with)."
        ),
    )
    parser.add_argument(
        "export", type=Path, metavar="EXPORT",
        help="the export file (.json or .json.gz); - reads it from standard input",
    )
    add_data_option(parser)
    add_settings_option(parser)
    add_json_option(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar or summary")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if (args.data / "data.mdb").exists():
        store = open_store(args.data, write=True)
        finish_left_forgets(store, args.data, load_settings(args.settings))
        finish_left_purges(store, args.data)
        finish_owed_erasures(store, args.data)
    listen = load_live_settings(args.settings).listen
    report = import_file(args.data, args.export, quiet=args.quiet, listen=listen)
    if args.json:
        print_json(report.to_json(), sys.stdout)  # looked up now: capture may swap it
    elif not args.quiet:
        print(describe(report))
    return 0


def import_file(
    data: Path, export_path: Path, *, quiet: bool = True, listen: Listen = "all"
) -> ImportReport:
    """Import one export file into the data directory `data` (created if needed).

    The export is read a chunk of messages at a time (eva.core.dce_stream) to check
    all of it before anything is stored; one of up to READ_ONCE_BYTES is stored from
    what that read decoded, a longer one is read again to store it. One it cannot
    read so is read whole (`import_bytes`), which says what is wrong with it.
    """
    started = time.perf_counter()
    named = Path("standard input") if str(export_path) == "-" else export_path
    with _export_source(export_path) as blocks:
        try:
            outline = outline_export(blocks(), IMPORT_CHUNK, READ_ONCE_BYTES)
        except NotStreamable:
            raw = b"".join(blocks())
            return import_bytes(data, raw, named, quiet=quiet, started=started, listen=listen)
        if outline.kept is not None:
            chunks: Iterable[Sequence[Message]] = outline.kept
        else:
            chunks = _read_again(export_chunks(blocks(), outline.chunks), named)
        return _store(
            data, outline.head, outline.latest_ms, outline.messages, chunks, named, quiet,
            started, listen,
        )


def _read_again(
    chunks: Iterator[tuple[Message, ...]], export_path: Path
) -> Iterator[tuple[Message, ...]]:
    try:
        yield from chunks
    except NotStreamable:
        raise UserError(
            f"cannot import {export_path}: it changed while it was read; what was read of it "
            "is stored, and importing it again takes up the rest"
        ) from None


def import_bytes(
    data: Path,
    raw: bytes,
    export_path: Path,
    *,
    quiet: bool = True,
    started: float | None = None,
    listen: Listen = "all",
) -> ImportReport:
    """Import an export's bytes (named `export_path` in messages) into `data`."""
    started = time.perf_counter() if started is None else started
    try:
        export = parse_export(raw)
    except ExportError as error:
        raise UserError(f"cannot import {export_path}: {error}") from None
    del raw
    latest = max((utc_ms(m.timestamp) for m in export.messages), default=None)
    messages = export.messages
    chunks = (
        messages[start : start + IMPORT_CHUNK] for start in range(0, len(messages), IMPORT_CHUNK)
    )
    return _store(
        data, export, latest, len(messages), chunks, export_path, quiet, started, listen
    )


def _store(
    data: Path,
    head: ChannelExport,
    latest_ms: int | None,
    total: int,
    chunks: Iterable[Sequence[Message]],
    export_path: Path,
    quiet: bool,
    started: float,
    listen: Listen = "all",
) -> ImportReport:
    """Store a checked export's messages, given a chunk at a time, each chunk's events in
    a transaction of their own (the channel's description goes with the first)."""
    stream = head.stream
    store = open_store(data, must_exist=False, write=True)
    if not keeps(read_switches(store).get(stream), listen):
        raise UserError(
            f"Eva's memory of {stream} (#{head.channel.name}) is off"
            + (" (listen = \"chosen\" and it was never turned on)" if listen == "chosen"
               else "")
            + f": nothing was imported. eva channel on {stream} keeps it"
        )
    stored_meta = store.meta(stream)
    forgotten = Forgotten(stored_meta.forgotten if stored_meta is not None else {}, store.hashes)
    kept_out = opted_out(store)
    skipped = 0

    def skip(author_id: int, at_ms: int) -> bool:
        nonlocal skipped
        if forgotten(author_id, at_ms) or kept_out(stream.guild_id, author_id):
            skipped += 1
            return True
        return False

    making = ExportEvents(stored_meta, _known_in(store, stream), skip)
    described = channel_described(head, latest_ms, stored_meta)
    waiting: list[AnyEvent] = [] if described is None else [described]
    added = edited = 0
    authors: set[str] = set()
    progress = Progress("import", total, sys.stderr, quiet=quiet)
    try:
        for chunk in chunks:
            events = waiting + making.of(chunk)
            waiting = []
            authors.update(m.author.id for m in chunk)
            added += sum(isinstance(e, MessagePosted) for e in events)
            edited += sum(isinstance(e, MessageEdited) for e in events)
            _append(store, stream, events, export_path)
            store.backend.release_pages()
            progress.advance(len(chunk))
        _append(store, stream, waiting, export_path)
    finally:
        progress.close()
    meta = store.meta(stream)
    assert meta is not None
    distinct = len(making.seen)
    return ImportReport(
        file=str(export_path),
        stream=str(stream),
        guild_id=str(stream.guild_id),
        guild_name=meta.guild_name,
        channel_id=str(stream.channel_id),
        channel_name=meta.channel_name,
        added=added,
        edited=edited,
        already_present=distinct - added - edited - skipped,
        skipped_forgotten=skipped,
        repeated_in_export=total - distinct,
        messages=meta.messages,
        first_ms=meta.first_ms if meta.messages else None,
        last_ms=meta.last_ms if meta.messages else None,
        authors=len(authors),
        data_dir=str(data),
        data_dir_bytes=directory_bytes(data),
        seconds=round(time.perf_counter() - started, 3),
    )


def _append(store: EventStore, stream: StreamId, events: list[AnyEvent], export_path: Path) -> None:
    if not events:
        return
    try:
        store.append(stream, events)
    except Rejected as error:
        raise UserError(f"cannot import {export_path}: the store refused it: {error}") from None


def read_export(path: Path) -> bytes:
    """The export's JSON bytes; gzip data is unpacked, whatever the file is named."""
    with _export_source(path) as blocks:
        return b"".join(blocks())


@contextmanager
def _export_source(path: Path) -> Iterator[Callable[[], Iterator[bytes]]]:
    """A way to read the export's JSON bytes from the start, block by block, as often as
    needed (standard input is kept in a temporary file for that); gzip data is unpacked,
    whatever the file is named. A file that cannot be read is a UserError."""
    if str(path) != "-":
        yield lambda: _blocks(lambda: path.open("rb"), path)
        return
    with tempfile.TemporaryFile() as spool:
        shutil.copyfileobj(sys.stdin.buffer, spool, READ_BLOCK)  # looked up now: capture swaps it

        def rewound() -> AbstractContextManager[BinaryIO]:
            spool.seek(0)
            return nullcontext(spool)

        yield lambda: _blocks(rewound, path)


def _blocks(
    open_file: Callable[[], AbstractContextManager[BinaryIO]], path: Path
) -> Iterator[bytes]:
    try:
        with open_file() as file:
            packed = file.read(len(GZIP_MAGIC))
            if packed == GZIP_MAGIC:
                file.seek(0)
                with gzip.GzipFile(fileobj=file) as unpacked:
                    while block := unpacked.read(READ_BLOCK):
                        yield block
                return
            if path.suffix == ".gz":
                raise UserError(f"{path} is named .gz but is not gzip data")
            yield packed
            while block := file.read(READ_BLOCK):
                yield block
    except FileNotFoundError:
        raise UserError(f"no such file: {path}") from None
    except IsADirectoryError:
        raise UserError(f"{path} is a directory, not an export file") from None
    except EOFError:
        raise UserError(f"{path}: the gzip data is truncated") from None
    except (gzip.BadGzipFile, zlib.error) as error:
        raise UserError(f"{path}: the gzip data is corrupt ({error})") from None
    except OSError as error:
        raise UserError(f"cannot read {path}: {error.strerror or error}") from None


def directory_bytes(path: Path) -> int:
    """The bytes of the files directly in a directory (0 if it does not exist)."""
    try:
        return sum(entry.stat().st_size for entry in os.scandir(path) if entry.is_file())
    except FileNotFoundError:
        return 0


def describe(report: ImportReport) -> str:
    """The summary printed after an import."""
    rows = [
        ("channel", f"#{report.channel_name} ({report.stream})"),
        ("guild", report.guild_name or "(no name)"),
        ("messages added", f"{report.added:,}"),
        ("edits recorded", f"{report.edited:,}"),
        ("already present", f"{report.already_present:,}"),
        ("messages now", f"{report.messages:,}"),
        ("first message", _iso(report.first_ms) or "-"),
        ("last message", _iso(report.last_ms) or "-"),
        ("authors in export", f"{report.authors:,}"),
        ("data directory", f"{report.data_dir} ({report.data_dir_bytes / 1e6:.1f} MB)"),
    ]
    if report.repeated_in_export:
        rows.insert(5, ("repeated ids skipped", f"{report.repeated_in_export:,}"))
    if report.skipped_forgotten:
        rows.insert(5, ("forgotten, skipped", f"{report.skipped_forgotten:,} (people who "
                        "asked to be forgotten, from before they asked, or not to be kept)"))
    width = max(len(name) for name, _ in rows)
    lines = [f"imported {report.file} in {report.seconds:.2f} s"]
    lines += [f"  {name:<{width}}  {value}" for name, value in rows]
    return "\n".join(lines)


def _known_in(store: EventStore, stream: StreamId) -> Callable[[int], KnownMessage | None]:
    def known(message_id: int) -> KnownMessage | None:
        index = store.index_of(stream, message_id)
        if index is None:
            return None
        stored = store.message(stream, index)
        if stored is None:
            return None
        return KnownMessage(index, stored.content, stored.attachments, stored.deleted)

    return known


def _iso(ms: int | None) -> str | None:
    if ms is None:
        return None
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)
    return moment.isoformat(timespec="milliseconds")

