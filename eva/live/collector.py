# The cyclic garbage collector, set for a process that serves chat.
#
# Shell (process-wide state). Serving makes objects that live a few
# milliseconds each: requests waiting in inboxes, their events, posts queued
# for the writer. Python's young generation is collected every 700 new
# objects, so under load many of these are still alive at a collection, are
# promoted, and then fill the old generation, whose collections walk every
# object of the process and stop the trio loop for that long (100 ms and more
# with a few hundred thousand objects, a second with millions). Collecting the
# young generation every 10,000 objects lets most of them die first (reference
# counting frees them; the cyclic collector only has to find cycles), and what
# start-up made is frozen out of the full collections altogether.
#
# In a burst of people's messages (eva.live.pace), collections are held: what
# survives the young generation then is the state a burst builds (the
# channels woken, their messages not made into leaves yet), not garbage, and
# walking it stops the loop for milliseconds (tens of them for the middle
# generation) while messages wait. They run again once the burst is over, or
# at once if the young generation grows past HELD_MOST objects, so a burst
# that never ends is collected all the same.
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

YOUNG_GENERATION: Final = 10_000
"""New objects between two collections of the young generation while serving (Python: 700)."""
HELD_MOST: Final = 200_000
"""New objects a burst may leave uncollected before the young generation is collected."""


class _State:
    serving = False  # inside `serving_collector`
    held = False  # collections are held for a burst (the collector is disabled)


@contextmanager
def serving_collector() -> Iterator[None]:
    """Collect the young generation every `YOUNG_GENERATION` objects in the block, and
    let `hold_in_burst` hold collections; on leaving it, the former thresholds, and
    what was frozen is collected again."""
    before = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION, *before[1:])
    _State.serving = True
    try:
        yield
    finally:
        _State.serving = False
        if _State.held:
            _State.held = False
            gc.enable()
        gc.unfreeze()
        gc.set_threshold(*before)


def freeze_start_up() -> None:
    """Leave what start-up made (modules, classes, caches, loaded data) out of the
    full collections, until the `serving_collector` block ends."""
    gc.collect()
    gc.freeze()


def held_in_burst() -> bool:
    """Whether collections are held for a burst now."""
    return _State.held


def hold_in_burst(burst: bool) -> None:
    """Hold the collector's work while a burst of people's messages is on (the writer
    says whether one is, at each group); nothing outside `serving_collector`."""
    if not _State.serving:
        return
    if burst and not _State.held:
        _State.held = True
        gc.disable()
    elif not burst and _State.held:
        _State.held = False
        gc.enable()  # the next new object starts the collection the burst held back
    elif _State.held and gc.get_count()[0] > HELD_MOST:
        gc.collect(0)
