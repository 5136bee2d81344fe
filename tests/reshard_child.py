# The program the reshard kill test kills: `eva reshard` that dies at one step, or whenever.
#
# Run as `python tests/reshard_child.py STEP NTH ARGS...`: ARGS are `eva reshard`'s. With
# STEP "time" it prints "ack" once the command is about to start and runs it whole, each
# transaction a little slower, for the parent to kill at a random moment; otherwise it
# kills itself with SIGKILL at the NTH time (from 1) it reaches STEP, and exits NOT_REACHED
# if it never does. Batches and copy transactions are made small, so a small fleet takes
# many of each.
from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from typing import Any

from eva.cli.main import main as eva_main
from eva.store import lmdb_kv, moving, reshard

NOT_REACHED = 3
SLOWER_S = 0.01
STEPS = ("copy", "journal", "remove", "compact_copy", "compact_swap", "journal_dropped")


def die_at(nth: int, work: Callable[..., Any]) -> Callable[..., Any]:
    """`work`, killing the process as it is called for the nth time."""
    calls = 0

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == nth:
            os.kill(os.getpid(), signal.SIGKILL)
        return work(*args, **kwargs)

    return counted


def main(step: str, nth: int, argv: list[str]) -> int:
    moving.COPY_ROWS = 40
    reshard.BATCH_EVENTS = 60
    if step == "time":  # each transaction made a little slower, for kills to land inside
        moving._put = slowed(moving._put)  # type: ignore[assignment]
        reshard.remove_streams = slowed(reshard.remove_streams)  # type: ignore[assignment]
        lmdb_kv._copy_table = slowed(lmdb_kv._copy_table)  # type: ignore[assignment]
        print("ack", flush=True)
    elif step == "copy":  # between two transactions of a copy
        moving._put = die_at(nth, moving._put)  # type: ignore[assignment]
    elif step == "journal":  # the journal names the guilds, nothing removed yet
        reshard.note_in_journal = die_after(nth, reshard.note_in_journal)  # type: ignore[assignment]
    elif step == "remove":  # guilds removed from their source, not compacted yet
        reshard.remove_streams = die_after(nth, reshard.remove_streams)  # type: ignore[assignment]
    elif step == "compact_copy":  # the compacting copy half written
        lmdb_kv._copy_table = die_at(nth, lmdb_kv._copy_table)  # type: ignore[assignment]
    elif step == "compact_swap":  # the compacted file in place, the journal still there
        lmdb_kv.fsync_dir = die_after(nth, lmdb_kv.fsync_dir)  # type: ignore[assignment]
    elif step == "journal_dropped":  # the last journal gone, the report not printed
        reshard.drop_journal = die_after(nth, reshard.drop_journal)  # type: ignore[assignment]
    status = eva_main(["reshard", *argv])
    return status if step == "time" else NOT_REACHED


def slowed(work: Callable[..., Any]) -> Callable[..., Any]:
    """`work`, a few milliseconds later."""

    def later(*args: Any, **kwargs: Any) -> Any:
        time.sleep(SLOWER_S)
        return work(*args, **kwargs)

    return later


def die_after(nth: int, work: Callable[..., Any]) -> Callable[..., Any]:
    """`work`, killing the process as its nth call returns."""
    calls = 0

    def counted(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        result = work(*args, **kwargs)
        calls += 1
        if calls == nth:
            os.kill(os.getpid(), signal.SIGKILL)
        return result

    return counted


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3:]))
