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
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Final

YOUNG_GENERATION: Final = 10_000
"""New objects between two collections of the young generation while serving (Python: 700)."""


@contextmanager
def serving_collector() -> Iterator[None]:
    """Collect the young generation every `YOUNG_GENERATION` objects in the block; on
    leaving it, the former thresholds, and what was frozen is collected again."""
    before = gc.get_threshold()
    gc.set_threshold(YOUNG_GENERATION, *before[1:])
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def freeze_start_up() -> None:
    """Leave what start-up made (modules, classes, caches, loaded data) out of the
    full collections, until the `serving_collector` block ends."""
    gc.collect()
    gc.freeze()
