# Which message batch each line task went out in, kept in the data directory.
#
# Shell: a batch may take hours, and a process may stop meanwhile. The line
# writer writes down each task's batch as soon as the batch exists, before it
# waits; after a restart the same task (same fingerprint) is taken from that
# batch's results instead of being sent and paid for again. Entries hold a
# task's fingerprint and the batch's ids, never chat text, and go once the
# task's line has been taken, or after `KEEP_DAYS` (the API keeps results
# for 29 days).
from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence

import msgspec
import trio

from eva.core.keys import BATCHES
from eva.core.tables import Tables
from eva.store.kv import Backend

KEEP_DAYS = 29
DAY_MS = 86_400_000


class BatchRef(msgspec.Struct, frozen=True, array_like=True):
    """Where a task's answer is: its batch, its request in the batch, and when it was sent."""

    batch_id: str
    custom_id: str
    sent_ms: int


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(BatchRef)


class BatchBook:
    """Task fingerprints to the batches they were sent in, in the backend's `batches` table."""

    def __init__(self, backend: Backend, clock_ms: Callable[[], int] | None = None) -> None:
        self.backend = backend
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._pruned_ms = 0

    def find(self, fingerprints: Iterable[bytes]) -> dict[bytes, BatchRef]:
        """The batches of those tasks that are written down and not too old (a short read)."""
        oldest = self._clock_ms() - KEEP_DAYS * DAY_MS
        found: dict[bytes, BatchRef] = {}
        with self.backend.reading() as tables:
            for fingerprint in fingerprints:
                data = tables.get(BATCHES, fingerprint)
                if data is not None and (ref := _decoder.decode(data)).sent_ms >= oldest:
                    found[fingerprint] = ref
        return found

    def now_ms(self) -> int:
        return self._clock_ms()

    async def record(self, fingerprints: Sequence[bytes], ref: BatchRef) -> None:
        """Write down that these tasks went out in `ref`'s batch (durably, off the loop)."""
        value = _encoder.encode(ref)
        prune = ref.sent_ms - self._pruned_ms > DAY_MS

        def work(tables: Tables) -> None:
            if prune:
                _prune(tables, ref.sent_ms - KEEP_DAYS * DAY_MS)
            tables.put_many(BATCHES, ((fingerprint, value) for fingerprint in fingerprints))

        await trio.to_thread.run_sync(self.backend.write, work)
        if prune:
            self._pruned_ms = ref.sent_ms

    async def drop(self, fingerprints: Sequence[bytes]) -> None:
        """Forget those tasks' batches: their lines have been taken, or the batch is gone."""
        if not fingerprints:
            return

        def work(tables: Tables) -> None:
            for fingerprint in fingerprints:
                tables.delete(BATCHES, fingerprint)

        await trio.to_thread.run_sync(self.backend.write, work)


def _prune(tables: Tables, oldest_ms: int) -> None:
    stale = [
        key
        for key, data in tables.scan(BATCHES, b"", b"\xff" * 17)
        if _decoder.decode(data).sent_ms < oldest_ms
    ]
    for key in stale:
        tables.delete(BATCHES, key)
