# When things happen: compression runs and publishing, decided from values.
#
# Pure: the time is an argument (UTC milliseconds) and the state is the
# stream's record; nothing here reads a clock or the store.
# Invariants: a publish never happens without new leaves to add (the row only
# changes when it can grow); a compression run always leaves the newest
# messages, about `tail_keep_bytes` of them, without leaves.
from __future__ import annotations

from collections.abc import Iterable

from eva.core.events import PublishReason
from eva.core.settings import MemorySettings
from eva.core.state import StreamMeta


def compression_due(meta: StreamMeta, settings: MemorySettings) -> bool:
    """Whether the messages with no leaf yet have passed the compression mark."""
    return meta.unleafed_bytes > settings.compress_at_bytes


def run_wanted(meta: StreamMeta, settings: MemorySettings, force: bool = False) -> bool:
    """Whether a compression run should start: asked for (`force`: a retry, or merges
    ready), lines to make again (`stale`), or compression due."""
    return force or meta.stale > 0 or compression_due(meta, settings)


def run_reach(
    cutoff: int, meta: StreamMeta | None, unfinished_upto: int, settings: MemorySettings
) -> int:
    """The index up to which a run writes leaves.

    `cutoff` (see `compression_cutoff`) when compression is due; otherwise only the
    merges left ready, up to the leaf frontier. Never short of `unfinished_upto`, what
    a run that failed left undone.
    """
    upto = cutoff
    if meta is not None and not compression_due(meta, settings):
        upto = meta.leaf_frontier
    return max(upto, unfinished_upto)


def compression_cutoff(
    newest_first: Iterable[tuple[int, int]], leaf_frontier: int, settings: MemorySettings
) -> int:
    """The index up to which a run writes leaves: it keeps the newest ~`tail_keep_bytes`.

    `newest_first` yields (index, rendered bytes) from the newest message back
    to `leaf_frontier`. The kept tail is at most `tail_keep_bytes`: the message
    that would cross the mark gets its leaf in this run.
    """
    kept = 0
    cutoff = leaf_frontier
    for index, size in newest_first:
        if kept + size > settings.tail_keep_bytes:
            return index + 1
        kept += size
        cutoff = index
    return max(cutoff, leaf_frontier)


def overflow_due(meta: StreamMeta, settings: MemorySettings) -> bool:
    """Whether the tail has passed `overflow_tail_bytes` with new leaves to publish."""
    return (
        meta.leaf_frontier > meta.row_frontier
        and meta.tail_bytes > settings.overflow_tail_bytes
    )


def publish_reason(
    meta: StreamMeta, now_ms: int, last_input_ms: int, settings: MemorySettings
) -> PublishReason | None:
    """Why the channel should publish now, or None.

    It publishes when there are new leaves to add to the row and either the
    chat has been quiet for `quiet_ms` since `last_input_ms`, or the tail has
    passed `overflow_tail_bytes`.
    """
    if overflow_due(meta, settings):
        return "overflow"
    if meta.leaf_frontier <= meta.row_frontier:
        return None
    if now_ms - last_input_ms >= settings.quiet_ms:
        return "quiet"
    return None


def pending_tasks(meta: StreamMeta, settings: MemorySettings) -> int:
    """Merges ready now and lines to remake, plus the unleafed messages when compression is due.

    The second part is an estimate: a run leaves the newest ~`tail_keep_bytes`
    without leaves, so it writes somewhat fewer leaves than this counts.
    """
    unleafed = meta.messages - meta.leaf_frontier if compression_due(meta, settings) else 0
    return meta.ready + meta.stale + unleafed
