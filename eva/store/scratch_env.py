# Environments only this process uses for a while: a replay's scratch, a compacting copy.
#
# Shell. Not synced (a crash leaves a copy the next writer clears, never the data) and
# without LMDB's lock file (no other process opens them); every table Eva has.
from __future__ import annotations

from pathlib import Path
from typing import Any

import lmdb

from eva.core.keys import ALL_TABLES


def open_scratch_env(path: Path, map_bytes: int) -> Any:
    """A new or emptied LMDB environment at `path` for this process alone."""
    return lmdb.open(
        str(path),
        map_size=map_bytes,
        max_dbs=len(ALL_TABLES) + 4,
        sync=False,
        metasync=False,
        lock=False,
        readahead=False,
    )
