# Replay against the live store: rebuild each stream and compare, byte for byte.
#
# One read transaction per stream, so the events and the live projections it
# compares are the same snapshot even while a writer keeps appending.
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from eva.core import keys
from eva.core.keys import StreamId
from eva.core.projection import read_meta
from eva.core.replay import differing_tables, digest, projection_rows, rebuild
from eva.store.event_store import EventStore


@dataclass(frozen=True, slots=True)
class ReplayResult:
    stream: StreamId
    events: int
    live_digest: str
    rebuilt_digest: str
    differing: tuple[str, ...]

    @property
    def ok(self) -> bool:
        return not self.differing and self.live_digest == self.rebuilt_digest


def replay_stream(
    store: EventStore, stream: StreamId, progress: Callable[[int], None] | None = None
) -> ReplayResult:
    """Rebuild one stream's projections from its events and compare with the live ones."""
    prefix = keys.stream_prefix(stream)
    with store.backend.reading() as tables:
        stored = tables.scan("events", prefix, keys.prefix_end(prefix))
        rebuilt_tables = rebuild(stream, ((keys.seq_of(k), v) for k, v in stored), progress)
        live = projection_rows(tables, stream)
    rebuilt = projection_rows(rebuilt_tables, stream)
    rebuilt_meta = read_meta(rebuilt_tables, stream)
    events = 0 if rebuilt_meta is None else rebuilt_meta.position
    return ReplayResult(
        stream=stream,
        events=events,
        live_digest=digest(live),
        rebuilt_digest=digest(rebuilt),
        differing=tuple(differing_tables(live, rebuilt)),
    )
