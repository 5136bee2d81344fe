# Publishing: swap in a new row (old row + new leaves, then the sawtooth) and a shorter tail.
#
# Shell: reads lines from the store and appends the row.published event.
# The rule is the core's (row.append_leaves, row.sawtooth). Between merges the
# row only grows at its end, which keeps the provider's prompt cache warm.
# The lines the sawtooth may read are measured first, a chunk at a time with a
# checkpoint between chunks, so a publish of thousands of new leaves never holds
# the trio loop (and a reply waiting on it) for long.
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import tzinfo

import trio

from eva.core.address import Address, address_at, addresses_of, parent
from eva.core.events import LineWritten, PublishReason, RowPublished
from eva.core.keys import StreamId
from eva.core.render import render_line, utf8_size
from eva.core.row import append_leaves, row_bytes, sawtooth
from eva.core.settings import MemorySettings
from eva.memory.compress import Append
from eva.store.event_store import EventStore

MEASURE_CHUNK = 256
"""Lines measured between two checkpoints."""


@dataclass(slots=True)
class LineSizes:
    """Row lines as rendered, and their bytes, remembered across publishes.

    A line is written once, so its rendering holds until forget or an edit
    makes it again: then `clear` (or `forget` for the addresses made again).
    Publishing measures lines through it and the prompt reads the row from
    it, so a line is rendered once however often the row is published. Only
    the published row's lines are kept (`keep`), with the sizes of the lines
    above them that the next publish may merge into: a line merged out of the
    row never comes back into it, so the cache stays about as long as the row.
    """

    sizes: dict[Address, int] = field(default_factory=dict)
    texts: dict[Address, str] = field(default_factory=dict)
    zone: tzinfo | None = None
    # Lines written and not rendered yet (`learn`): rendered when first asked for,
    # since most merges written are never measured.
    pending: dict[Address, LineWritten] = field(default_factory=dict)

    def render(self, store: EventStore, stream: StreamId, address: Address, tz: tzinfo) -> str:
        """The row entry of the line at `address`, rendered in `tz`."""
        text = self._rendered(store, stream, address, tz)
        if text is None:
            raise LookupError(f"{stream}: row line {address} is missing")
        return text

    def measure(self, store: EventStore, stream: StreamId, address: Address, tz: tzinfo) -> int:
        """The rendered bytes of the line at `address`."""
        size = self.sizes.get(address)
        if size is None or tz != self.zone:
            self.render(store, stream, address, tz)
            size = self.sizes[address]
        return size

    def _render_pending(self, address: Address, tz: tzinfo) -> bool:
        """Render the line at `address` if it was learnt and not rendered yet (in the
        zone the caller has just set)."""
        line = self.pending.pop(address, None)
        if line is None:
            return False
        self._keep(address, line, tz)
        return True

    def _keep(self, address: Address, line: LineWritten, tz: tzinfo) -> str:
        """Render a line and remember its text and bytes."""
        text = render_line(address, line.text, line.first_ms, line.last_ms, tz)
        self.texts[address] = text
        self.sizes[address] = utf8_size(text)
        return text

    def _rendered(
        self, store: EventStore, stream: StreamId, address: Address, tz: tzinfo
    ) -> str | None:
        self.use_zone(tz)
        text = self.texts.get(address)
        if text is None and self._render_pending(address, tz):
            text = self.texts[address]
        if text is None:
            line = store.line(stream, *address)
            if line is None:
                return None
            text = self._keep(address, line, tz)
        return text

    def use_zone(self, tz: tzinfo) -> None:
        """Render in `tz` from now on (what was rendered in another zone is dropped), so
        that `learn` measures lines from the first one written."""
        if tz != self.zone:
            self.clear()
            self.zone = tz

    def fill(
        self,
        store: EventStore,
        stream: StreamId,
        addresses: Sequence[Address],
        tz: tzinfo,
        *,
        sizes_only: bool = False,
    ) -> None:
        """Render the lines at `addresses` not rendered yet (`sizes_only`: not measured
        yet), read in one transaction."""
        self.use_zone(tz)
        have = self.sizes if sizes_only else self.texts
        missing = [
            address
            for address in addresses
            if address not in have and not self._render_pending(address, tz)
        ]
        if not missing:
            return
        for address, line in store.lines(stream, missing).items():
            self._keep(address, line, tz)

    def learn(self, lines: Iterable[LineWritten]) -> None:
        """Remember lines as they are written, so a publish need not read them back.

        They are rendered when first measured or read (most merges never are)
        and kept until the next publish keeps only its row's (`keep`): most
        lines written between two publishes are new leaves that go into the
        row, and the prompt reads them from here. Nothing is learnt before the
        zone is known.
        """
        if self.zone is None:
            return
        pending, sizes, texts = self.pending, self.sizes, self.texts
        for line in lines:
            address = address_at(line.start, line.size)
            pending[address] = line
            sizes.pop(address, None)  # made again, if rendered before: the new text counts
            texts.pop(address, None)

    def keep(self, row: Sequence[Address]) -> None:
        """Drop every line but those of `row` and those past its end, and the sizes of
        all but those and the lines above the row's.

        A line past the row's end was written while the row was being chosen (the
        channel's compression goes on meanwhile): the next publish adds it.
        """
        end = row[-1].start + row[-1].size if row else 0
        texts, sizes, pending = self.texts, self.sizes, self.pending
        kept_texts = {a: texts[a] for a in row if a in texts}
        kept_texts.update((a, text) for a, text in texts.items() if a.start >= end)
        kept: dict[Address, int] = {}
        kept_pending: dict[Address, LineWritten] = {}
        for address in row:
            while address not in kept and address not in kept_pending:
                if address in sizes:
                    kept[address] = sizes[address]
                elif address in pending:
                    kept_pending[address] = pending[address]
                else:
                    break
                address = parent(address)
        kept.update((a, size) for a, size in sizes.items() if a.start >= end)
        kept_pending.update((a, line) for a, line in pending.items() if a.start >= end)
        self.texts, self.sizes, self.pending = kept_texts, kept, kept_pending

    def forget(self, addresses: set[Address]) -> None:
        for address in addresses:
            self.sizes.pop(address, None)
            self.texts.pop(address, None)
            self.pending.pop(address, None)

    def clear(self) -> None:
        self.sizes.clear()
        self.texts.clear()
        self.pending.clear()


async def publish(
    store: EventStore,
    stream: StreamId,
    append: Append,
    settings: MemorySettings,
    now_ms: int,
    reason: PublishReason,
    tz: tzinfo,
    sizes: LineSizes,
) -> RowPublished | None:
    """Publish the row with every new leaf added; None when there is nothing new."""
    meta = store.meta(stream)
    if meta is None or (meta.leaf_frontier <= meta.row_frontier and reason != "forget"):
        return None
    current = store.published_row(stream)
    old_row = addresses_of(current.entries) if current is not None else []
    row = append_leaves(old_row, meta.leaf_frontier)
    known = await _measure_row(store, stream, row, tz, sizes)
    if row_bytes(row, known.__getitem__) > settings.row_high_bytes:
        await _measure_above(store, stream, known, tz, sizes)
    result = sawtooth(
        row, known.__getitem__, known.__contains__, settings.row_high_bytes, settings.row_low_bytes
    )
    sizes.keep(result.row)
    sizes.fill(store, stream, result.row, tz)  # the texts the prompt reads, in one transaction
    event = RowPublished(
        at_ms=now_ms,
        entries=tuple((a.start, a.size) for a in result.row),
        frontier=meta.leaf_frontier,
        reason=reason,
        row_bytes=result.row_bytes,
    )
    await append(stream, [event])
    return event


async def _measure_row(
    store: EventStore, stream: StreamId, row: Sequence[Address], tz: tzinfo, sizes: LineSizes
) -> dict[Address, int]:
    """The rendered bytes of each line of `row` (all written)."""
    sizes.fill(store, stream, row, tz, sizes_only=True)  # new lines, in one transaction
    known: dict[Address, int] = {}
    for count, address in enumerate(row, 1):
        known[address] = sizes.measure(store, stream, address, tz)
        if count % MEASURE_CHUNK == 0:
            await trio.lowlevel.checkpoint()
    return known


async def _measure_above(
    store: EventStore, stream: StreamId, known: dict[Address, int], tz: tzinfo, sizes: LineSizes
) -> None:
    """Add to `known` every written line above its lines, level by level.

    A merge needs its parent's line, so these are all the lines a sawtooth from
    those lines can reach: `known` then answers both its questions.
    """
    level = list(known)
    while level:
        above = sorted({parent(address) for address in level} - known.keys())
        level = []
        for first in range(0, len(above), MEASURE_CHUNK):
            chunk = above[first : first + MEASURE_CHUNK]
            sizes.fill(store, stream, chunk, tz, sizes_only=True)
            for address in chunk:
                size = sizes.sizes.get(address)
                if size is not None:  # else not written yet
                    known[address] = size
                    level.append(address)
            await trio.lowlevel.checkpoint()
