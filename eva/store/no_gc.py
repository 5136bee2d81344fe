# Pausing the cyclic garbage collector around bulk work in the shell.
#
# Import and replay make millions of objects and no reference cycles; left
# on, the collector walks the growing heap again and again. Reference
# counting still frees everything as usual while it is paused.
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic GC for the block (it stays off if it was off)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
