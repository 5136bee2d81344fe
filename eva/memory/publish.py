# Publishing: swap in a new row (old row + new leaves, then the sawtooth) and a shorter tail.
#
# Shell: reads lines from the store and appends the row.published event.
# The rule is the core's (row.append_leaves, row.sawtooth). Between merges the
# row only grows at its end, which keeps the provider's prompt cache warm.
# The lines the sawtooth may read are measured first, a chunk at a time with a
# checkpoint between chunks, so a publish of thousands of new leaves never holds
# the trio loop (and a reply waiting on it) for long. Their sizes are held in an
# array a level (`MeasuredLines`): a build's first publish measures every line
# of the channel, a million leaves and as many lines above them.
from __future__ import annotations

from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import tzinfo

import trio

from eva.core.address import Address, address_at, addresses_of, parent
from eva.core.events import LineWritten, PublishReason, RowPublished
from eva.core.keys import StreamId
from eva.core.render import line_bytes, render_line, utf8_size
from eva.core.row import append_leaves, row_bytes, sawtooth
from eva.core.settings import MemorySettings
from eva.memory.compress import Append
from eva.store.event_store import EventStore

READ_CHUNK = 1024
"""Lines measured between two checkpoints, read in one transaction."""
RELEASE_EVERY = 8
"""Chunks measured between two releases of the store's mapped pages (a build's first
publish reads every line; see LmdbBackend.release_pages)."""


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

    def sizes_of(
        self, store: EventStore, stream: StreamId, addresses: Sequence[Address], tz: tzinfo
    ) -> list[int | None]:
        """The rendered bytes of the line at each of `addresses` (None where none is
        written): those remembered, the rest read in one transaction and not remembered
        (a publish remembers those of its row, `remember`)."""
        self.use_zone(tz)
        sizes, pending = self.sizes, self.pending
        found: list[int | None] = []
        missing: list[Address] = []
        for address in addresses:
            size = sizes.get(address)
            if size is None:
                line = pending.get(address)
                if line is None:
                    missing.append(address)
                else:
                    size = line_bytes(address, line.text, line.first_ms, line.last_ms, tz)
            found.append(size)
        if not missing:
            return found
        read = {
            address: line_bytes(address, line.text, line.first_ms, line.last_ms, tz)
            for address, line in store.lines(stream, missing).items()
        }
        return [read.get(address) if size is None else size for address, size in zip(
            addresses, found, strict=True
        )]

    def remember(self, address: Address, size: int) -> None:
        """Remember the size a publish measured of a line not waiting to be rendered."""
        if address not in self.pending:
            self.sizes[address] = size

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
    measured: MeasuredLines | None = None,
) -> RowPublished | None:
    """Publish the row with every new leaf added; None when there is nothing new.

    `measured` may hold the sizes of lines as rendered in `tz` that this process
    knows already (a build measures the lines it writes): they are not read again.
    """
    meta = store.meta(stream)
    if meta is None or (meta.leaf_frontier <= meta.row_frontier and reason != "forget"):
        return None
    current = store.published_row(stream)
    old_row = addresses_of(current.entries) if current is not None else []
    row = append_leaves(old_row, meta.leaf_frontier)
    if measured is None:
        measured = MeasuredLines()
    written = await _measure(store, stream, row, tz, sizes, measured)
    if len(written) < len(row):
        missing = next(address for address in row if address not in measured)
        raise LookupError(f"{stream}: row line {missing} is missing")
    if row_bytes(row, measured.get) > settings.row_high_bytes:
        await _measure_above(store, stream, row, tz, sizes, measured)
    result = sawtooth(
        row,
        measured.get,
        measured.__contains__,
        settings.row_high_bytes,
        settings.row_low_bytes,
        record_merges=False,
    )
    for address in result.row:  # the row's lines, and those above that it may merge into
        while address in measured:
            sizes.remember(address, measured.get(address))
            address = parent(address)
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


class MeasuredLines:
    """The rendered bytes of lines, by address, in an array a level: a few bytes a line
    where a dict would take about a hundred."""

    def __init__(self) -> None:
        self._levels: list[array[int]] = []

    def learn(self, lines: Iterable[LineWritten], tz: tzinfo) -> None:
        """Measure lines as they are written, rendered in `tz`."""
        for line in lines:
            address = address_at(line.start, line.size)
            self.put(address, line_bytes(address, line.text, line.first_ms, line.last_ms, tz))

    def put(self, address: Address, size: int) -> None:
        level = address.size.bit_length() - 1
        while len(self._levels) <= level:
            self._levels.append(array("i"))
        sizes = self._levels[level]
        at = address.start >> level
        if at >= len(sizes):
            sizes.extend(_UNKNOWN * (at + 1 - len(sizes)))
        sizes[at] = size

    def get(self, address: Address) -> int:
        """The bytes of a measured line; KeyError if it was not measured."""
        size = self._size(address)
        if size < 0:
            raise KeyError(address)
        return size

    def __contains__(self, address: Address) -> bool:
        return self._size(address) >= 0

    def _size(self, address: Address) -> int:
        level = address.size.bit_length() - 1
        if level >= len(self._levels):
            return -1
        sizes = self._levels[level]
        at = address.start >> level
        return sizes[at] if at < len(sizes) else -1


_UNKNOWN = array("i", [-1])


async def _measure(
    store: EventStore,
    stream: StreamId,
    addresses: Sequence[Address],
    tz: tzinfo,
    sizes: LineSizes,
    measured: MeasuredLines,
) -> list[Address]:
    """Measure the lines at `addresses` not measured yet, a chunk at a time; those that
    are written."""
    written: list[Address] = []
    unknown: list[Address] = []
    for address in addresses:
        (written if address in measured else unknown).append(address)
    for number, first in enumerate(range(0, len(unknown), READ_CHUNK), 1):
        chunk = unknown[first : first + READ_CHUNK]
        for address, size in zip(chunk, sizes.sizes_of(store, stream, chunk, tz), strict=True):
            if size is not None:
                measured.put(address, size)
                written.append(address)
        if number % RELEASE_EVERY == 0:
            store.backend.release_pages()
        await trio.lowlevel.checkpoint()
    return written


async def _measure_above(
    store: EventStore,
    stream: StreamId,
    row: Sequence[Address],
    tz: tzinfo,
    sizes: LineSizes,
    measured: MeasuredLines,
) -> None:
    """Measure every written line above the lines of `row`, level by level.

    A merge needs its parent's line, so these are all the lines a sawtooth from
    those lines can reach: `measured` then answers both its questions.
    """
    level: Sequence[Address] = row
    while level:
        above = sorted({parent(address) for address in level if parent(address) not in measured})
        level = await _measure(store, stream, above, tz, sizes, measured)
