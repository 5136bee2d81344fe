# Benchmark of the event store on the shared sample: import, replay, and the decode floor.
#
# Reads /work/shared/data/komodo-talk-general.dce.json.gz in place (it is
# never copied into the project) and imports it into a fresh temporary data
# directory by the same code path as `eva import`, then replays the stream.
# The floor is the time to decode the same stored events with msgspec and
# nothing else, measured in the same run, so replay speed can be judged
# against what this machine can do at all. Replay runs with the log's seals
# checked and without, to give what the check costs. The last line printed is one JSON
# object; the temporary directory is removed at the end.
from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

from eva.cli import common
from eva.cli.cmd_import import directory_bytes, import_file
from eva.core.chain import check_stream
from eva.core.events import decode_event
from eva.core.keys import StreamId
from eva.store.event_store import EventStore
from eva.store.key_binding import bind
from eva.store.key_store import open_key_store
from eva.store.lmdb_kv import open_backend
from eva.store.replay import replay_stream

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "komodo-talk-general.dce.json.gz"
TARGETS = {
    "import_msgs_per_s": 60_000, "replay_events_per_s": 150_000, "data_dir_mb": 30,
    "sealing_import_x": 1.3, "sealing_replay_x": 1.3,
}
"""The log's goals: import (the recall index kept as it goes), replay with the seals
checked, the data directory the sample makes, and what sealing people's words costs."""


def measure(temp: Path, *, sealed: bool) -> dict[str, object]:
    """Import the sample into a fresh directory and replay it: with people's words sealed
    (what every command does), or in the clear (the directory bound to no key store, as
    before sealing), for what sealing costs."""
    data = temp / ("sealed" if sealed else "plain")
    with contextlib.ExitStack() as stack:
        if not sealed:  # no key store bound: the directory writes in the clear
            stack.enter_context(mock.patch.object(common, "bind", return_value=None))
        started = time.perf_counter()
        report = import_file(data, SAMPLE, quiet=True)
        import_s = time.perf_counter() - started

    backend = open_backend(data)
    store = EventStore(backend)
    keys = open_key_store()
    if sealed and keys is not None:
        bind(store, keys, write=False)
    stream = StreamId(int(report.guild_id), int(report.channel_id))
    # replay with the seals checked (the default) and without, alternated, the best of
    # two each: the seals' own cost is the difference
    timings: dict[bool, list[float]] = {True: [], False: []}
    for check_seals in (True, False, True, False):
        started = time.perf_counter()
        result = replay_stream(store, stream, check_seals=check_seals)
        timings[check_seals].append(time.perf_counter() - started)
    replay_s, unsealed_s = min(timings[True]), min(timings[False])
    with backend.reading() as tables:
        started = time.perf_counter()
        log = check_stream(tables, stream)
        seals_s = time.perf_counter() - started

    stored = [raw for _, raw in store.raw_events(stream)]
    started = time.perf_counter()
    for raw in stored:
        decode_event(raw)
    floor_s = time.perf_counter() - started
    data_bytes = directory_bytes(data)
    backend.close()
    return {
        "messages": report.messages,
        "events": result.events,
        "import_s": round(import_s, 3),
        "import_msgs_per_s": round(report.added / import_s),
        "replay_s": round(replay_s, 3),
        "replay_events_per_s": round(result.events / replay_s),
        "replay_ok": result.ok,
        "replay_without_seals_s": round(unsealed_s, 3),
        "seals_alone_s": round(seals_s, 3),
        "log_sealed": log.ok,
        "floor_s": round(floor_s, 3),
        "floor_events_per_s": round(len(stored) / floor_s),
        "data_dir_mb": round(data_bytes / 1e6, 1),
    }


def main() -> int:
    if not SAMPLE.exists():
        print(f"bench_store: the shared sample is not at {SAMPLE}; nothing to measure")
        return 0
    with tempfile.TemporaryDirectory(prefix="eva-bench-") as temp:
        os.environ["EVA_KEYS"] = str(Path(temp) / "keys")  # never the operator's key store
        os.environ.pop("EVA_MASTER_KEY", None)
        with contextlib.redirect_stderr(io.StringIO()):
            open_key_store(create=True)
        plain = measure(Path(temp), sealed=False)
        summary = measure(Path(temp), sealed=True)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    summary["peak_rss_mb"] = round(peak_kb / 1024, 1)
    # what sealing costs, measured in the same run: import and replay at most 1.3 times
    summary["plain_import_s"] = plain["import_s"]
    summary["plain_replay_s"] = plain["replay_s"]
    summary["plain_data_dir_mb"] = plain["data_dir_mb"]
    summary["sealing_import_x"] = _ratio(summary["import_s"], plain["import_s"])
    summary["sealing_replay_x"] = _ratio(summary["replay_s"], plain["replay_s"])
    missed = [
        name
        for name, target in TARGETS.items()
        if _missed(name, summary[name], target)
    ]
    print(f"targets: {TARGETS}; missed: {missed or 'none'}", file=sys.stderr)
    print(json.dumps(summary))
    return 0


def _ratio(sealed: object, plain: object) -> float:
    assert isinstance(sealed, float)
    assert isinstance(plain, float)
    return round(sealed / plain, 2)


def _missed(name: str, value: object, target: float) -> bool:
    assert isinstance(value, int | float)
    return value > target if name.endswith(("_mb", "_x")) else value < target


if __name__ == "__main__":
    sys.exit(main())
