# Publishing: swap in a new row (old row + new leaves, then the sawtooth) and a shorter tail.
#
# Shell: reads lines from the store and appends the row.published event.
# The rule is the core's (row.append_leaves, row.sawtooth). Between merges the
# row only grows at its end, which keeps the provider's prompt cache warm.
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import tzinfo

from eva.core.address import Address
from eva.core.events import PublishReason, RowPublished
from eva.core.keys import StreamId
from eva.core.render import render_line
from eva.core.row import append_leaves, sawtooth
from eva.core.settings import MemorySettings
from eva.memory.compress import Append
from eva.store.event_store import EventStore


@dataclass(slots=True)
class LineSizes:
    """Row lines as rendered, and their bytes, remembered across publishes.

    A line is written once, so its rendering holds until forget or an edit
    makes it again: then `clear` (or `forget` for the addresses made again).
    Publishing measures lines through it and the prompt reads the row from
    it, so a line is rendered once however often the row is published.
    """

    sizes: dict[Address, int] = field(default_factory=dict)
    texts: dict[Address, str] = field(default_factory=dict)
    zone: tzinfo | None = None

    def render(self, store: EventStore, stream: StreamId, address: Address, tz: tzinfo) -> str:
        """The row entry of the line at `address`, rendered in `tz`."""
        if tz != self.zone:
            self.clear()
            self.zone = tz
        text = self.texts.get(address)
        if text is None:
            line = store.line(stream, *address)
            if line is None:
                raise LookupError(f"{stream}: row line {address} is missing")
            text = render_line(address, line.text, line.first_ms, line.last_ms, tz)
            self.texts[address] = text
            self.sizes[address] = len(text.encode())
        return text

    def measure(self, store: EventStore, stream: StreamId, address: Address, tz: tzinfo) -> int:
        size = self.sizes.get(address)
        if size is None or tz != self.zone:
            self.render(store, stream, address, tz)
            size = self.sizes[address]
        return size

    def keep(self, addresses: Sequence[Address]) -> None:
        """Drop every line but those at `addresses` (a line merged out never comes back)."""
        self.texts = {a: self.texts[a] for a in addresses if a in self.texts}
        self.sizes = {a: self.sizes[a] for a in addresses if a in self.sizes}

    def forget(self, addresses: set[Address]) -> None:
        for address in addresses:
            self.sizes.pop(address, None)
            self.texts.pop(address, None)

    def clear(self) -> None:
        self.sizes.clear()
        self.texts.clear()


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
    old_row = [Address(*entry) for entry in current.entries] if current is not None else []
    row = append_leaves(old_row, meta.leaf_frontier)

    def line_bytes(address: Address) -> int:
        return sizes.measure(store, stream, address, tz)

    def has_line(address: Address) -> bool:
        return address in sizes.sizes or store.line(stream, *address) is not None

    result = sawtooth(row, line_bytes, has_line, settings.row_high_bytes, settings.row_low_bytes)
    sizes.keep(result.row)
    event = RowPublished(
        at_ms=now_ms,
        entries=tuple((a.start, a.size) for a in result.row),
        frontier=meta.leaf_frontier,
        reason=reason,
        row_bytes=result.row_bytes,
    )
    await append(stream, [event])
    return event
