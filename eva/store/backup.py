# Backups of a data directory: a consistent compacted copy, its manifest, and their checks.
#
# Shell over LMDB and files. A backup is one read snapshot of the environment copied
# entry by entry into a new data file (`LmdbBackend.copy_to`), so it may be taken while
# the bot writes, and holds no freed page: no byte of a person erased before it was
# taken. Beside it, `backup.json` names every stream with its event count, newest seal
# and replay digest (ids and hashes, no text), which a restore checks the copy against.
# What people asked to be forgotten is in each stream's record (StreamMeta.forgotten);
# `forget_records` reads it, so that a restore can forget again whoever a newer
# directory says was forgotten after the backup was taken.
from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from eva.core.keys import StreamId, parse_stream
from eva.core.sealed_events import keys_destroyed
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import LMDB_LOCK_FILE, LmdbBackend
from eva.store.private import private_dir, private_files, write_private
from eva.store.replay import repair_stream, replay_stream

MANIFEST = "backup.json"
PARTIAL = ".partial"

Digests = dict[StreamId, tuple[int, str, str]]  # events, newest seal, replay digest


class BackupRefused(Exception):
    """A backup that cannot be taken or used; nothing was written."""


@dataclass(frozen=True, slots=True)
class Backup:
    path: Path
    streams: int
    bytes: int
    seconds: float


def replayed(
    store: EventStore, sealed_away: set[StreamId] | None = None
) -> tuple[Digests, list[str]]:
    """Every stream's (events, newest seal, replay digest), and what did not replay.

    Given `sealed_away`, a stream whose projections differ from its log only because
    some of its events are sealed with keys destroyed since (a copy made before a
    forget) counts as whole if its log's seals check: it is put in `sealed_away`, with
    the digest its projections were made with, from the log's record of them. Its
    projections are made again once those events are erased (`repair_sealed_away`).
    """
    digests: Digests = {}
    broken = []
    for meta in store.streams():
        stream = StreamId(meta.guild_id, meta.channel_id)
        result = replay_stream(store, stream)
        log = result.log
        whole_log = log is not None and log.ok and not result.damaged
        if sealed_away is not None and not result.ok and whole_log and _keys_gone(store, stream):
            assert log is not None
            sealed_away.add(stream)
            digests[stream] = (result.events, log.head, result.live_digest)
            continue
        if not result.ok or log is None:
            broken.append(f"{stream} does not replay ({', '.join(result.differing) or 'log'})")
            continue
        digests[stream] = (result.events, log.head, result.rebuilt_digest)
    return digests, broken


def _keys_gone(store: EventStore, stream: StreamId) -> bool:
    """Whether some event of the stream is sealed with keys destroyed since it was written."""
    return any(keys_destroyed(event) for _, event in store.events(stream))


def repair_sealed_away(store: EventStore, streams: Iterable[StreamId]) -> None:
    """Make the projections of streams `replayed` found sealed away what their logs give,
    now that the events sealed with destroyed keys are erased, and compact the data file
    (the index they replace held those people's words)."""
    repaired = [repair_stream(store, stream) for stream in streams]
    if repaired and isinstance(store.backend, LmdbBackend):
        store.backend.compact()


def take_backup(store: EventStore, source: Path, target: Path) -> Backup:
    """Copy the store into the new directory `target` with its manifest, and check the
    copy replays; built under `target.partial` and renamed into place when whole."""
    backend = store.backend
    if not isinstance(backend, LmdbBackend):
        raise BackupRefused("only an LMDB data directory can be backed up")
    if target.exists():
        raise BackupRefused(f"{target} exists already; a backup goes to a new directory")
    if target.resolve().is_relative_to(source.resolve()):
        raise BackupRefused(
            f"{target} is inside the data directory {source}: a backup there would be "
            "copied into the next one, and a forget could not erase it; put it elsewhere"
        )
    started = time.perf_counter()
    partial = target.with_name(target.name + PARTIAL)
    shutil.rmtree(partial, ignore_errors=True)
    try:
        size = backend.copy_to(partial)
        copy = EventStore(LmdbBackend(partial))
        try:
            digests, broken = replayed(copy)
        finally:
            copy.backend.close()
        if broken:
            raise BackupRefused(f"the copy does not replay: {broken[0]}; {target} was not made")
        manifest = {
            "source": str(source),
            "taken_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "streams": {str(s): list(value) for s, value in sorted(digests.items())},
        }
        write_private(partial / MANIFEST, json.dumps(manifest, indent=1))
    except BaseException:
        # A copy cut short holds everyone's words where no forget looks: never left behind
        # (one killed outright is removed by the next backup to the same place).
        shutil.rmtree(partial, ignore_errors=True)
        raise
    (partial / LMDB_LOCK_FILE).unlink(missing_ok=True)
    os.replace(partial, target)
    return Backup(target, len(digests), size, time.perf_counter() - started)


def read_manifest(backup: Path) -> Digests:
    """The streams a backup's manifest names; BackupRefused if it has none or it is bad."""
    try:
        value = json.loads((backup / MANIFEST).read_text(encoding="utf-8"))
        return {
            parse_stream(name): (int(events), str(head), str(digest))
            for name, (events, head, digest) in value["streams"].items()
        }
    except FileNotFoundError:
        raise BackupRefused(f"{backup} is no backup made by `eva backup` (no {MANIFEST})") from None
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise BackupRefused(f"{backup / MANIFEST} is damaged ({error})") from None


def forget_records(store: EventStore) -> dict[StreamId, dict[str, int]]:
    """Per stream, who was forgotten there (person hash -> when they last asked)."""
    return {
        StreamId(meta.guild_id, meta.channel_id): dict(meta.forgotten)
        for meta in store.streams()
        if meta.forgotten
    }


def forgotten_since(
    restored: dict[StreamId, dict[str, int]], newer: list[dict[StreamId, dict[str, int]]]
) -> dict[str, list[StreamId]]:
    """Person hash -> the restored streams where a newer record says they asked to be
    forgotten later than the restored copy knows (or at all)."""
    found: dict[str, set[StreamId]] = {}
    for records in newer:
        for stream, people in records.items():
            known = restored.get(stream, {})
            for person, at_ms in people.items():
                if at_ms > known.get(person, -1):
                    found.setdefault(person, set()).add(stream)
    return {person: sorted(streams) for person, streams in sorted(found.items())}


def stage(backup: Path, staging: Path) -> None:
    """Copy a backup's data file into `staging` (a new folder), synced."""
    shutil.rmtree(staging, ignore_errors=True)
    private_dir(staging, exist_ok=False)
    try:
        shutil.copyfile(backup / "data.mdb", staging / "data.mdb")
        private_files(staging / "data.mdb")
        with open(staging / "data.mdb", "rb") as handle:
            os.fsync(handle.fileno())
    except OSError as error:  # the copy's side failed (a full disk) or the backup's
        shutil.rmtree(staging, ignore_errors=True)
        raise OSError(
            f"the backup could not be copied into {staging} ({error.strerror or error}): "
            "is that disk full? Nothing was changed"
        ) from error

