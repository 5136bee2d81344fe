# The write process itself: a child interpreter that commits the groups it is sent.
#
# Shell. Started by eva.store.write_process with the data directory as its
# argument; it opens the same LMDB environment and does exactly what
# `EventStore.append_many` does in the serving process: one write transaction
# per group, each batch landing whole or refused whole, durable before the
# answer is written. It reads requests until its input ends, dies with the
# thread that started it (Linux: PR_SET_PDEATHSIG), and leaves stop signals to
# that process. It imports no trio: it starts as fast as it can.
from __future__ import annotations

import gc
import os
import sys
from pathlib import Path
from typing import IO, NoReturn

import msgspec

from eva.core.events import decode_event
from eva.core.keys import StreamId
from eva.core.projection import Rejected
from eva.store.event_store import Batch, EventStore
from eva.store.lmdb_kv import open_backend
from eva.store.pipes import become_child, frame, read_frame
from eva.store.write_protocol import Committed, Failed, RawBatch, Result, encoder, request_decoder

YOUNG_GENERATION = 10_000
"""New objects between two collections of the young generation (Python: 700)."""


def serve(store: EventStore, requests: IO[bytes], answers: IO[bytes]) -> None:
    """The child's side: commit each request's batches and answer, until the input ends."""
    while (body := read_frame(requests)) is not None:
        answer: Committed | Failed
        try:
            answer = Committed(_commit(store, request_decoder.decode(body)))
        except Exception as error:  # the whole commit failed: the sender hears why
            answer = Failed(f"{type(error).__name__}: {error}")
        answers.write(frame(encoder.encode(answer)))
        answers.flush()


def _commit(store: EventStore, raw: list[RawBatch]) -> list[Result]:
    results: list[Result | None] = [None] * len(raw)
    batches: list[Batch] = []
    stored: list[list[bytes]] = []
    positions: list[int] = []
    for position, item in enumerate(raw):
        stream = StreamId(item.guild_id, item.channel_id)
        try:
            events = [decode_event(data) for data in item.events]
        except msgspec.DecodeError as error:
            results[position] = Result(refused=f"{stream}: an event cannot be stored: {error}")
            continue
        positions.append(position)
        batches.append(Batch(stream, events))
        stored.append([bytes(data) for data in item.events])
    for position, result in zip(positions, store.append_many(batches, stored), strict=True):
        results[position] = (
            Result(refused=str(result))
            if isinstance(result, Rejected)
            else Result(result.first, result.count, meta=result.meta)
        )
    return [result for result in results if result is not None]


def main() -> NoReturn:
    become_child()
    # Each commit makes and drops thousands of short-lived objects (decoded events,
    # keys): the young generation is collected every YOUNG_GENERATION of them, as
    # a serving process does, and what start-up made is left out of full collections.
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_GENERATION, *gc.get_threshold()[1:])
    backend = open_backend(Path(sys.argv[1]))
    serve(EventStore(backend), sys.stdin.buffer, sys.stdout.buffer)
    backend.close()
    os._exit(0)


if __name__ == "__main__":
    main()
