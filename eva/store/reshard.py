# Resharding: every guild's streams moved to the data directory of the shard that owns it.
#
# Shell over several data directories at once (the caller holds each one's writer
# lock); which guild goes where is the core's (eva.core.shards). A guild moves in
# three steps, each one safe to cut short and run again:
#   1. copy: its streams' entries written into the owner's directory as they are
#      (eva.store.moving); a stream the owner holds already is checked, not copied;
#   2. verify: each copy replayed in its new place (seals checked, projections
#      rebuilt from the log) and its digest, event count and newest seal compared
#      with the original's; a guild with any stream that does not verify stays;
#   3. remove: the source directory's journal (`reshard.json`: guild ids, no text)
#      names the guild first, then its streams' entries are deleted in one
#      transaction. Once every guild has moved, each directory with a journal is
#      rewritten by a compacting copy, so no freed page keeps the moved words, and
#      every file of it is scanned for the moved messages' texts (read from their
#      new place) as a forget proves itself; only then is the journal removed.
# A rerun after a kill finds what is done by looking: a copy already there and
# equal is not copied again, a guild already gone from its source is not moved
# again, and a journal left behind means a compaction still owed.
from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from eva.core.keys import StreamId
from eva.core.shards import Move, moves
from eva.store.erasure import PROOF_TEXTS_MOST, prove_erased, texts_of_guilds
from eva.store.event_store import EventStore
from eva.store.guild_records import copy_guild_records, remove_guild_records
from eva.store.lmdb_kv import LmdbBackend, fsync_dir
from eva.store.moving import Copied, copy_streams, remove_streams
from eva.store.replay import replay_stream

JOURNAL = "reshard.json"
BATCH_EVENTS = 200_000
"""Events of the guilds moved between two directories that are copied, verified and
removed together (one removal transaction), at most; a larger guild goes alone."""
BATCH_GUILDS = 1_000


class ReshardRefused(Exception):
    """The directories are not in a state to reshard; nothing was written."""


@dataclass(slots=True)
class Place:
    """One data directory of the fleet: shard `number` of the new layout, or an old
    directory only emptied (`number` None)."""

    path: Path
    store: EventStore
    number: int | None = None

    @property
    def label(self) -> str:
        return str(self.path) if self.number is None else f"{self.path} (shard {self.number})"


@dataclass(slots=True)
class GuildMove:
    """What happened to one guild that had to move."""

    guild_id: int
    source: Path
    target: Path
    channels: int = 0
    events: int = 0
    messages: int = 0
    outcome: str = "planned"  # moved, conflict, failed (or planned, in a dry run)
    why: str = ""
    already_copied: int = 0  # channels an earlier run had copied

    def to_json(self) -> dict[str, object]:
        return {
            "guild_id": self.guild_id,
            "from": str(self.source),
            "to": str(self.target),
            "channels": self.channels,
            "events": self.events,
            "messages": self.messages,
            "outcome": self.outcome,
            "why": self.why,
            "already_copied": self.already_copied,
        }


@dataclass(slots=True)
class Cleared:
    """A source directory compacted and scanned after guilds left it."""

    path: Path
    guilds: int
    bytes_before: int = 0
    bytes_after: int = 0
    texts_checked: int = 0
    leftover_hits: int = 0

    @property
    def ok(self) -> bool:
        return self.leftover_hits == 0

    def to_json(self) -> dict[str, object]:
        return {
            "dir": str(self.path),
            "guilds_removed": self.guilds,
            "bytes_before": self.bytes_before,
            "bytes_after": self.bytes_after,
            "texts_checked": self.texts_checked,
            "leftover_hits": self.leftover_hits,
            "ok": self.ok,
        }


@dataclass(slots=True)
class ReshardReport:
    shard_count: int
    guilds: int = 0  # guilds found in every directory
    in_place: int = 0  # guilds that were where they belong already
    moves: list[GuildMove] = field(default_factory=list)
    cleared: list[Cleared] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(m.outcome in ("moved", "planned") for m in self.moves) and all(
            c.ok for c in self.cleared
        )


def holders(places: Sequence[Place]) -> dict[int, dict[int, list[StreamId]]]:
    """guild id -> place index -> the guild's streams held there."""
    found: dict[int, dict[int, list[StreamId]]] = {}
    for at, place in enumerate(places):
        for meta in place.store.streams():
            streams = found.setdefault(meta.guild_id, {}).setdefault(at, [])
            streams.append(StreamId(meta.guild_id, meta.channel_id))
    return found


def reshard(
    places: Sequence[Place],
    shard_count: int,
    *,
    dry_run: bool = False,
    on_guild: Callable[[GuildMove], None] | None = None,
) -> ReshardReport:
    """Move every guild to the place of the shard that owns it (places 0..shard_count-1
    are the shards in order; any after them are old directories to empty)."""
    started = time.perf_counter()
    held = holders(places)
    planned = moves({guild: list(at) for guild, at in held.items()}, shard_count)
    report = ReshardReport(shard_count, guilds=len(held))
    report.in_place = len(held) - len({move.guild_id for move in planned})
    _refuse_pending_forgets(places, held, planned)
    for batch in _batches(places, held, planned):
        moved = [_described(places, held, move) for move in batch]
        if not dry_run:
            _move_batch(places, held, batch, moved)
        for one in moved:
            report.moves.append(one)
            if on_guild is not None:
                on_guild(one)
    if not dry_run:
        for place in places:
            if (place.path / JOURNAL).exists():
                report.cleared.append(clear(place, places))
    report.seconds = time.perf_counter() - started
    return report


def _refuse_pending_forgets(
    places: Sequence[Place], held: dict[int, dict[int, list[StreamId]]], planned: list[Move]
) -> None:
    for move in planned:
        place = places[move.source]
        for stream in held[move.guild_id][move.source]:
            meta = place.store.meta(stream)
            if meta is not None and meta.forgetting:
                raise ReshardRefused(
                    f"a forget is pending in {stream} in {place.path}: finish it first "
                    f"(eva forget --resume --data {place.path}), then reshard"
                )


def _batches(
    places: Sequence[Place], held: dict[int, dict[int, list[StreamId]]], planned: list[Move]
) -> Iterator[list[Move]]:
    """The moves in batches of one source and target, up to BATCH_EVENTS events each."""
    batch: list[Move] = []
    events = 0
    for move in sorted(planned, key=lambda m: (m.source, m.target, m.guild_id)):
        size = _events(places[move.source], held[move.guild_id][move.source])
        same_way = not batch or (batch[0].source, batch[0].target) == (move.source, move.target)
        if batch and (not same_way or events + size > BATCH_EVENTS or len(batch) >= BATCH_GUILDS):
            yield batch
            batch, events = [], 0
        batch.append(move)
        events += size
    if batch:
        yield batch


def _events(place: Place, streams: Sequence[StreamId]) -> int:
    metas = [place.store.meta(stream) for stream in streams]
    return sum(meta.position for meta in metas if meta is not None)


def _described(
    places: Sequence[Place], held: dict[int, dict[int, list[StreamId]]], move: Move
) -> GuildMove:
    source = places[move.source]
    metas = [source.store.meta(s) for s in held[move.guild_id][move.source]]
    return GuildMove(
        guild_id=move.guild_id,
        source=source.path,
        target=places[move.target].path,
        channels=len(metas),
        events=sum(m.position for m in metas if m is not None),
        messages=sum(m.messages for m in metas if m is not None),
    )


def _move_batch(
    places: Sequence[Place],
    held: dict[int, dict[int, list[StreamId]]],
    batch: list[Move],
    moved: list[GuildMove],
) -> None:
    """Copy, verify and remove one batch of guilds that go the same way."""
    source, target = places[batch[0].source], places[batch[0].target]
    streams = [s for move in batch for s in held[move.guild_id][move.source]]
    copied = {
        c.stream: c for c in copy_streams(source.store.backend, target.store.backend, streams)
    }
    leaving: list[StreamId] = []
    for move, guild in zip(batch, moved, strict=True):
        mine = held[move.guild_id][move.source]
        guild.already_copied = sum(1 for s in mine if s in copied and copied[s].already)
        problems = [p for s in mine if (p := _problem(target, s, copied.get(s)))]
        if problems:
            guild.outcome = "conflict" if any(c for c, _ in problems) else "failed"
            guild.why = "; ".join(why for _, why in problems)
        else:
            guild.outcome = "moved"
            leaving.extend(mine)
    gone = [g.guild_id for g in moved if g.outcome == "moved"]
    if gone:
        # the servers' switches, "don't remember me"s and erasure records go with them
        copy_guild_records(source.store.backend, target.store.backend, gone)
        note_in_journal(source.path, gone)
        remove_streams(source.store.backend, leaving)
        remove_guild_records(source.store.backend, gone)


def _problem(target: Place, stream: StreamId, copied: Copied | None) -> tuple[bool, str] | None:
    """Why the stream's copy in `target` cannot stand for the original (and whether it is
    a conflict: another stream of the same ids there), or None."""
    if copied is None:
        return None  # it had no record in the source: nothing to copy
    if copied.conflict is not None:
        return True, (
            f"{target.path} holds another {stream} ({copied.conflict.events} events against "
            f"{copied.source.events} in the source); neither was changed"
        )
    result = replay_stream(target.store, stream)
    head = None if result.log is None else result.log.head
    if not result.ok:
        broken = ", ".join(result.differing) or result.damaged or "its seals"
        return False, f"the copy of {stream} does not replay ({broken}); the original stays"
    if (result.events, head, result.rebuilt_digest) != (
        copied.source.events,
        copied.source.head,
        copied.source.digest,
    ):
        return False, f"the copy of {stream} replays to another digest; the original stays"
    return None


def note_in_journal(directory: Path, guilds: Sequence[int]) -> None:
    """Add guilds to the directory's journal of guilds removed and not yet compacted away,
    durably, before they are removed."""
    path = directory / JOURNAL
    known = journal_guilds(directory)
    merged = sorted(set(known) | set(guilds))
    if merged == sorted(known):
        return
    temporary = path.with_suffix(".tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump({"removed_guilds": merged}, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    fsync_dir(directory)


def journal_guilds(directory: Path) -> list[int]:
    """The guilds a directory's journal names (none without a journal, or with one that
    does not read: the compaction it stands for is still owed, only the scan after it
    has no texts to look for)."""
    try:
        value = json.loads((directory / JOURNAL).read_text(encoding="utf-8"))
        guilds = value["removed_guilds"]
    except (FileNotFoundError, ValueError, KeyError, TypeError):
        return []
    return [g for g in guilds if isinstance(g, int)] if isinstance(guilds, list) else []


def clear(place: Place, places: Sequence[Place]) -> Cleared:
    """Compact a directory guilds left, prove no text of theirs is in its files, and drop
    its journal; the journal stays when the proof fails."""
    guilds = journal_guilds(place.path)
    cleared = Cleared(place.path, len(guilds))
    backend = place.store.backend
    if isinstance(backend, LmdbBackend):
        cleared.bytes_before, cleared.bytes_after = backend.compact()
    gone = set(guilds) - {meta.guild_id for meta in place.store.streams()}
    texts = [text for other in places if other is not place for text in guild_texts(other, gone)]
    scan = prove_erased(place.store, place.path, texts)
    cleared.texts_checked, cleared.leftover_hits = scan.texts, scan.hits
    if scan.hits == 0:
        drop_journal(place.path)
    return cleared


def drop_journal(directory: Path) -> None:
    """Remove the directory's journal, durably: its guilds are compacted away."""
    (directory / JOURNAL).unlink(missing_ok=True)
    fsync_dir(directory)


def guild_texts(place: Place, guilds: set[int], most: int = PROOF_TEXTS_MOST) -> list[str]:
    """The texts of the messages of the guilds that a place holds (`texts_of_guilds`)."""
    return texts_of_guilds(place.store, guilds, most)


