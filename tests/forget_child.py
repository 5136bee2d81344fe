# The program the forget crash test kills: `eva forget --user` with a SIGKILL at one step.
#
# Run as `python tests/forget_child.py DATA STEP PERSON_ID [SETTINGS]`. It builds nothing:
# it wraps one function of the forget pipeline so that the process kills
# itself with SIGKILL at STEP, then runs the same code path as
# `eva forget --user PERSON_ID --data DATA [--settings SETTINGS]`. STEP "none" runs it whole
# (the reference). If the step is never reached it exits with NOT_REACHED, so
# the parent can tell a kill that did not happen from one that did.
from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from eva.cli.main import main as eva_main
from eva.core.events import AnyEvent, ForgetRequested
from eva.core.keys import StreamId
from eva.memory import remake
from eva.store import erasure, lmdb_kv
from eva.store.event_store import Appended, EventStore

STEPS = ("none", "tombstone", "remake", "purge", "copy", "before_swap", "after_swap")
NOT_REACHED = 3


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def kill_after_tombstone() -> None:
    """Killed as soon as a ForgetRequested is committed, before any message is erased."""
    append = EventStore.append

    def append_then_die(self: EventStore, stream: StreamId, events: Sequence[AnyEvent]) -> Appended:
        result = append(self, stream, events)
        if any(isinstance(event, ForgetRequested) for event in events):
            die()
        return result

    EventStore.append = append_then_die  # type: ignore[method-assign]
    append_many = EventStore.append_many

    def append_many_then_die(self: EventStore, batches: Sequence[Any]) -> Any:
        result = append_many(self, batches)
        if any(isinstance(e, ForgetRequested) for batch in batches for e in batch.events):
            die()
        return result

    EventStore.append_many = append_many_then_die  # type: ignore[method-assign]


def kill_during_remake() -> None:
    """Killed after the first level of remade lines is committed, the levels above not."""
    append_lines = remake.append_lines

    async def append_then_die(run: Any, lines: list[Any]) -> None:
        await append_lines(run, lines)
        if lines:
            die()

    remake.append_lines = append_then_die


def kill_during_purge() -> None:
    """Killed inside the rewrite transaction, its events rewritten and sealed, not committed."""
    call = erasure._Rewrite.__call__

    def rewrite_or_die(self: Any, tables: Any) -> None:
        call(self, tables)
        die()

    erasure._Rewrite.__call__ = rewrite_or_die  # type: ignore[method-assign]


def kill_during_copy() -> None:
    """Killed once the copy holds its first table (in many commits) and none of the others."""
    lmdb_kv.COPY_CHUNK = 64
    copy_table = lmdb_kv._copy_table

    def copy_one_table(entries: Any, fresh: Any, table: Any, release: Any) -> None:
        copy_table(entries, fresh, table, release)
        die()

    lmdb_kv._copy_table = copy_one_table


def kill_at_swap(after: bool) -> None:
    """Killed just before (or just after) the compacted copy replaces data.mdb."""
    replace: Callable[..., None] = os.replace

    def replace_or_die(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        swapping = Path(src).parent.name == lmdb_kv.COMPACT_DIR
        if swapping and not after:
            die()
        replace(src, dst, *args, **kwargs)
        if swapping:
            die()

    os.replace = replace_or_die


def main(argv: list[str]) -> int:
    data, step, person = argv[1], argv[2], argv[3]
    match step:
        case "none":
            pass
        case "tombstone":
            kill_after_tombstone()
        case "remake":
            kill_during_remake()
        case "purge":
            kill_during_purge()
        case "copy":
            kill_during_copy()
        case "before_swap" | "after_swap":
            kill_at_swap(after=step == "after_swap")
        case _:
            raise SystemExit(f"unknown step {step!r}; one of {', '.join(STEPS)}")
    settings = ["--settings", argv[4]] if len(argv) > 4 else []
    status = eva_main(["forget", "--user", person, "--data", data, "--json", *settings])
    return status if step == "none" or status else NOT_REACHED


if __name__ == "__main__":
    sys.exit(main(sys.argv))
