# What every command shares: the data directory, JSON output, progress and errors.
#
# The shell's outer edge: it may print and read the environment; the commands
# built on it stay short.
from __future__ import annotations

import argparse
import difflib
import json
import logging
import os
import re
import sys
import time
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO, TypeVar

import msgspec

from eva.core.erasures import describe_erasure
from eva.core.keys import StreamId, parse_stream
from eva.core.settings import LiveSettings, MemorySettings
from eva.memory.person import people_named
from eva.store.event_store import EventStore
from eva.store.guild_erasure import erasure_records
from eva.store.key_binding import bind, bound_id
from eva.store.key_store import KeyStoreError, given_store_id, open_key_store
from eva.store.lmdb_kv import open_backend, open_backend_to_read
from eva.store.writer_lock import WriterBusy

DEFAULT_DATA = "./eva-data"
S = TypeVar("S", bound=msgspec.Struct)


class UserError(Exception):
    """A problem the person running the command can fix; printed without a traceback."""


CHANNEL_HELP = "GUILD/CHANNEL, a channel id, or a channel name"


def add_channel_argument(parser: argparse.ArgumentParser, *, optional: bool = False) -> None:
    """The channel a command is about: one always, or (optional) only this one of all."""
    if optional:
        parser.add_argument(
            "channel", nargs="?", help=f"only this channel (default: every channel): {CHANNEL_HELP}"
        )
    else:
        parser.add_argument("channel", help=CHANNEL_HELP)


def add_data_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        type=Path,
        default=Path(os.environ.get("EVA_DATA") or DEFAULT_DATA),  # set but empty: the default
        help="data directory (default: $EVA_DATA, else ./eva-data)",
    )


def add_json_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object for scripts")


def default_settings_path() -> Path | None:
    """Where settings are read from without --settings: the file $EVA_SETTINGS names, else
    $XDG_CONFIG_HOME/eva/eva.toml (~/.config/eva/eva.toml) if there is one, else none."""
    named = os.environ.get("EVA_SETTINGS", "").strip()
    if named:
        return Path(named)
    base = os.environ.get("XDG_CONFIG_HOME", "").strip() or str(Path.home() / ".config")
    found = Path(base) / "eva" / "eva.toml"
    return found if found.is_file() else None


def add_settings_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--settings",
        type=Path,
        default=default_settings_path(),
        help="TOML settings file (default: $EVA_SETTINGS, else ~/.config/eva/eva.toml if it "
        "exists); its tables override the defaults",
    )


SETTINGS_TABLES = ("memory", "models", "live")
"""The tables a settings file may hold."""


def nearest(name: str, known: Sequence[str], match: str | None = None) -> str:
    """`; did you mean X?` for the known name closest to a misspelled one, else nothing
    (`match`, if given, is compared instead of `name`, e.g. without brackets)."""
    plain = {k.strip("[]"): k for k in known}
    close = difflib.get_close_matches(match or name, list(plain), n=1, cutoff=0.6)
    return f"; did you mean {plain[close[0]]}?" if close else ""


def field_hint(error: Exception, kind: type[Any]) -> str:
    """For msgspec's `unknown field` error, the nearest field of `kind`, else nothing."""
    unknown = UNKNOWN_FIELD.search(str(error))
    if unknown is None:
        return ""
    return nearest(unknown.group(1), [field.name for field in msgspec.structs.fields(kind)])


UNKNOWN_FIELD = re.compile(r"unknown field `([^`]+)`")


FIND_USER_ID = (
    "a user id is shown in Discord with Developer Mode on (User Settings > Advanced): "
    "right-click the person and choose Copy User ID (Copy ID in older versions)"
)


def user_id_or_name(text: str) -> int | str:
    """--user as given: a Discord user id (a positive number) or a name to look up."""
    text = text.strip()
    if text.lstrip("-").isdigit():
        number = int(text)
        if number <= 0:
            raise argparse.ArgumentTypeError(
                f"{text} is no Discord user id (a positive number) nor a name"
            )
        return number
    if not text:
        raise argparse.ArgumentTypeError(f"give a Discord user id or a stored name; {FIND_USER_ID}")
    return text


def resolve_user(store: EventStore, given: int | str, guild: int | None = None) -> int:
    """The user id --user means: the id itself, or the one person a stored name is.

    A name that matches nobody, or several people, is a UserError listing what is
    known, so that the operator can pick by id.
    """
    if isinstance(given, int):
        return given
    found, names = people_named(store, given, guild)
    if len(found) == 1:
        return found[0].user_id
    if not found:
        raise UserError(
            f"no stored message is by anyone named {given!r}"
            f"{nearest(given, names) or '.'} Give their user id with --user ID; {FIND_USER_ID}"
        )
    shown = "; ".join(
        f"{p.user_id} ({', '.join(p.names[:3])}: {p.messages} messages)" for p in found[:8]
    )
    more = f"; and {len(found) - 8} more" if len(found) > 8 else ""
    raise UserError(
        f"{given!r} may be {len(found)} people: {shown}{more}. Give one id with --user ID"
    )


TOML_AT_LINE = re.compile(r"\(at line (\d+), column \d+\)")


def toml_hint(path: Path, error: tomllib.TOMLDecodeError) -> str:
    """What a TOML error most likely means, when its line is a table header.

    The parser reads `[memory` as far as the name and may complain that the
    table is declared twice before it sees the missing `]`.
    """
    where = TOML_AT_LINE.search(str(error))
    if where is None:
        return ""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        return ""
    number = int(where.group(1))
    line = lines[number - 1].split("#", 1)[0].strip() if 0 < number <= len(lines) else ""
    if not line.startswith("["):
        return ""
    if not line.endswith("]"):
        return f"; line {number} `{line}` is not closed: a table is named `{line.rstrip(']')}]`"
    if "twice" in str(error):
        return f"; {line} appears more than once: keep one {line} with all of its settings"
    return ""


def read_table(path: Path, table: str) -> dict[str, Any]:
    """The `[table]` of a TOML settings file as plain data ({} when the file has none).

    A table the file holds that no part of Eva reads is refused, named with the
    nearest valid one: a misspelled table would otherwise be ignored in silence.
    """
    try:
        whole = tomllib.loads(path.read_text(encoding="utf-8"))
        unknown = sorted(set(whole) - set(SETTINGS_TABLES))
        if unknown:
            raise UserError(
                f"bad settings in {path}: no table [{unknown[0]}] is read"
                f"{nearest(unknown[0], [f'[{t}]' for t in SETTINGS_TABLES], unknown[0])} "
                "(the tables are "
                f"{', '.join(f'[{t}]' for t in SETTINGS_TABLES)})"
            )
        data = whole.get(table, {})
    except FileNotFoundError:
        raise UserError(f"no settings file at {path}") from None
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(f"cannot read settings file {path}: {error}") from None
    except tomllib.TOMLDecodeError as error:
        raise UserError(f"bad settings in {path}: {error}{toml_hint(path, error)}") from None
    if not isinstance(data, dict):
        raise UserError(f"bad settings in {path}: [{table}] must be a table")
    return data


def settings_table(path: Path | None, table: str, kind: type[S]) -> S:
    """The `[table]` of a TOML settings file as `kind` (its defaults without a file)."""
    if path is None:
        return kind()
    return settings_value(path, read_table(path, table), kind)


def settings_value(path: Path, data: dict[str, Any], kind: type[S]) -> S:
    """Plain settings data as `kind`, checked; a UserError naming `path` if it is wrong."""
    try:
        value = msgspec.convert(data, kind)
        check = getattr(value, "check", None)
        return check() if callable(check) else value
    except (msgspec.ValidationError, ValueError) as error:
        raise UserError(f"bad settings in {path}: {error}{field_hint(error, kind)}") from None


def load_settings(path: Path | None) -> MemorySettings:
    """The memory settings: defaults, overridden by the [memory] table of a TOML file."""
    return settings_table(path, "memory", MemorySettings)


RETIRED_LIVE = frozenset({"write_process"})
"""Settings of the [live] table no longer read; files written before still load."""


def load_live_settings(path: Path | None) -> LiveSettings:
    """The process's settings: defaults, overridden by the [live] table of a TOML file."""
    if path is None:
        return LiveSettings()
    table = {k: v for k, v in read_table(path, "live").items() if k not in RETIRED_LIVE}
    return settings_value(path, table, LiveSettings)


def open_store(data: Path, *, must_exist: bool = True, write: bool = False) -> EventStore:
    """The store of a data directory; with `must_exist`, a missing one is a UserError, and
    one that cannot be opened (a file in its place, no permission) always is.

    A command that `write`s takes the directory's writer lock (one writing process at a
    time); one that only reads opens a directory it cannot write read-only.
    """
    if data.exists() and not data.is_dir():
        raise UserError(f"{data} is a file, not a data directory (set --data or EVA_DATA)")
    if must_exist and not (data / "data.mdb").exists():
        raise UserError(f"no Eva data directory at {data} (set --data or EVA_DATA)")
    if (data / "data.mdb").is_file() and (data / "data.mdb").stat().st_size == 0:
        # LMDB would start a new, empty store in it: what was there is lost, or being copied
        raise UserError(
            f"the data file {data / 'data.mdb'} is empty (0 bytes): restore the directory "
            "from a backup (eva restore), or remove the file to start anew"
        )
    readonly = data.is_dir() and not os.access(data, os.W_OK)
    if readonly and write:
        raise UserError(
            f"the data directory {data} is read-only here, and this command writes to it; "
            "commands that only read it (status, memory, zoom, recall, audit, replay) work"
        )
    try:
        try:
            open_already = None if write else open_backend_to_read(data)
            backend = open_already or open_backend(data, readonly=readonly)
        except PermissionError:
            # a file of it this process may read but not write (no permission, or made
            # immutable): a command that only reads opens it read-only instead
            if write or readonly:
                raise
            backend = open_backend(data, readonly=True)
        if write:
            backend.hold_writer_lock()
        store = EventStore(backend)
        bound = bound_id(store)
        if write or bound is not None:
            # a directory bound to a key store never gets a new one made in its place; the
            # master key it was made with, given, makes the same store again
            create = (write and bound is None) or (bound is not None and bound == given_store_id())
            bind(store, open_key_store(create=create), write=write)
        return store
    except WriterBusy as busy:
        raise UserError(str(busy)) from None
    except KeyStoreError as error:
        raise UserError(str(error)) from None
    except PermissionError as error:
        raise UserError(
            f"cannot open the data directory {data}: no permission "
            f"({error.strerror}: {error.filename or data})"
        ) from None
    except OSError as error:
        raise UserError(
            f"cannot open the data directory {data}: {error.strerror or error}"
        ) from None


def find_stream(store: EventStore, text: str) -> StreamId:
    """A channel given as GUILD/CHANNEL, a channel id, or a channel name."""
    metas = store.streams()
    try:
        stream = parse_stream(text)
    except ValueError:
        matches = [
            StreamId(m.guild_id, m.channel_id)
            for m in metas
            if text in (str(m.channel_id), m.channel_name, f"#{m.channel_name}")
        ]
        if len(matches) == 1:
            return matches[0]
        known = ", ".join(f"{m.guild_id}/{m.channel_id} (#{m.channel_name})" for m in metas)
        if not matches:
            raise UserError(
                f"no channel {text!r} in this data directory; known: {known or 'none'}"
                f"{_erased_with(store, text)}"
            ) from None
        raise UserError(f"{text!r} names several channels; use GUILD/CHANNEL: {known}") from None
    if all(StreamId(m.guild_id, m.channel_id) != stream for m in metas):
        raise UserError(
            f"no channel {stream} in this data directory{_erased_with(store, str(stream))}"
        )
    return stream


def _erased_with(store: EventStore, text: str) -> str:
    """`; ` and what became of the channel's server, if `text` names a channel of a
    server that was erased, or is to be (its id, or GUILD/CHANNEL)."""
    guild, _, channel = text.rpartition("/")
    for record in erasure_records(store):
        named = channel.isdigit() and int(channel) in (*record.channels, record.channel_id)
        whole = not record.channel_id and guild.isdigit() and int(guild) == record.guild_id
        if named or whole:
            return f"; {describe_erasure(record)}"
    return ""


def print_json(value: Any, out: TextIO | None = None) -> None:
    """One JSON object on a line, on `out` (standard output by default)."""
    (out or sys.stdout).write(json.dumps(value, ensure_ascii=False) + "\n")


class Progress:
    """A progress bar on standard error: redrawn in place on a terminal, a few lines otherwise."""

    def __init__(
        self, label: str, total: int, out: TextIO | None = None, quiet: bool = False
    ) -> None:
        self.label = label
        self.total = max(total, 1)
        self.done = 0
        self.out = out if out is not None else sys.stderr
        self.quiet = quiet
        self.tty = self.out.isatty()
        self._started = time.monotonic()
        self._drawn = 0.0
        self._last_tenth = -1

    def advance(self, count: int = 1) -> None:
        self.done += count
        now = time.monotonic()
        if self.quiet:
            return
        if self.tty:
            if now - self._drawn >= 0.1 or self.done >= self.total:
                self._drawn = now
                self._draw(now)
        else:
            tenth = min(10, self.done * 10 // self.total)
            if tenth != self._last_tenth and now - self._started > 1.0:
                self._last_tenth = tenth
                self.out.write(f"{self.label}: {self.done}/{self.total}\n")

    def _draw(self, now: float) -> None:
        share = min(1.0, self.done / self.total)
        filled = int(share * 30)
        rate = self.done / max(now - self._started, 1e-9)
        bar = "#" * filled + "-" * (30 - filled)
        self.out.write(
            f"\r{self.label} [{bar}] {self.done}/{self.total} {share:4.0%} {rate:,.0f}/s"
        )
        self.out.flush()

    def close(self) -> None:
        if self.tty and not self.quiet:
            self._draw(time.monotonic())
            self.out.write("\n")
            self.out.flush()


class _OneLine(logging.Formatter):
    """A log record as one line named for the command: its message and its error's."""

    def __init__(self, command: str) -> None:
        super().__init__()
        self.command = command

    def format(self, record: logging.LogRecord) -> str:
        text = f"eva {self.command}: {record.getMessage()}"
        if record.exc_info and record.exc_info[1] is not None:
            text += f" ({record.exc_info[1]})"
        return text


def log_one_line(command: str) -> None:
    """Warnings and errors the live pipeline logs, shown as one line each on standard
    error (with EVA_DEBUG set, with where they happened)."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if getattr(h, "eva_one_line", False)]:
        root.removeHandler(old)  # a command run before in this process
    handler = logging.StreamHandler(sys.stderr)
    if not os.environ.get("EVA_DEBUG"):
        handler.setFormatter(_OneLine(command))
    handler.setLevel(logging.WARNING)
    handler.eva_one_line = True  # type: ignore[attr-defined]
    root.addHandler(handler)
