# Crash safety: kill a writing process with SIGKILL, again and again, and check the store.
#
# `crash_child.py` appends group commits and acknowledges each one on stdout
# only after the commit returned. After every kill this test reopens the same
# data directory (in this process, closing the backend after each check, so
# the per-process cache never holds a stale environment) and asserts: every
# acknowledged event is there, exactly as written; sequence numbers have no
# gap; every event decodes; and the projections equal a replay from scratch.
# The next child then continues from what is stored. SIGKILL tests a process
# crash, not a power cut: the OS still writes out what the process handed it.
from __future__ import annotations

import random
import time
from pathlib import Path

import pytest
from conftest import keyed
from crash_child import STREAMS, expected_event
from killing import kill_while_running

from eva.core.keys import StreamId, parse_stream
from eva.store import lmdb_kv
from eva.store.event_store import EventStore
from eva.store.replay import replay_stream

CHILD = Path(__file__).with_name("crash_child.py")
KILLS = 25  # the long run is scripts/crash_suite.py
SEED = 20240917
ACK_TIMEOUT_S = 20.0


def parse_acks(output: bytes) -> list[dict[StreamId, int]]:
    """The acknowledgement lines the child finished writing, in order."""
    acks = []
    for line in output.split(b"\n")[:-1]:  # a last line without its newline was cut short
        word, *pairs = line.decode().split()
        assert word == "ack", line
        ack = {}
        for pair in pairs:
            stream, _, seq = pair.partition("=")
            ack[parse_stream(stream)] = int(seq)
        acks.append(ack)
    return acks


def run_and_kill(data_dir: Path, seed: int, rng: random.Random) -> list[dict[StreamId, int]]:
    """Start a child, kill it at a random moment, and return what it acknowledged."""
    args = [str(CHILD), str(data_dir), str(seed)]
    return parse_acks(kill_while_running(args, rng, early_s=0.15, after_ack_s=(0.02, 0.2)))


def check_store(
    data_dir: Path, acked: dict[StreamId, int], checked: dict[StreamId, int]
) -> dict[StreamId, int]:
    """Assert the store holds every acknowledged event intact; return each stream's count.

    Events below `checked` were compared with what the child wrote at an
    earlier kill; they are still read, decoded and replayed, not compared again.
    """
    backend = lmdb_kv.open_backend(data_dir)
    try:
        store = keyed(EventStore(backend), write=False)  # the child seals what it writes
        counts = {}
        for stream in STREAMS:
            seqs = []
            for seq, event in store.events(stream):
                if seq >= checked[stream]:
                    assert event == expected_event(stream, seq), (stream, seq)
                seqs.append(seq)
            assert seqs == list(range(len(seqs))), f"{stream}: a gap in the sequence numbers"
            assert len(seqs) > acked.get(stream, -1), (
                f"{stream}: acknowledged up to {acked[stream]}, stored {len(seqs)}"
            )
            meta = store.meta(stream)
            stored = (0, 0) if meta is None else (meta.position, meta.messages)
            assert stored == (len(seqs), len(seqs))
            result = replay_stream(store, stream)
            assert result.ok, result
            counts[stream] = len(seqs)
        return counts
    finally:
        backend.close()


@pytest.mark.slow
def test_killed_writer_loses_nothing_acknowledged(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    data_dir = tmp_path / "data"
    acked: dict[StreamId, int] = {}
    counts = {stream: 0 for stream in STREAMS}
    acknowledged_runs = 0
    deadline = time.monotonic() + 120
    for run in range(KILLS):
        assert time.monotonic() < deadline, f"only {run} kills in the time allowed"
        acks = run_and_kill(data_dir, seed=SEED + run, rng=rng)
        for ack in acks:
            for stream, seq in ack.items():
                # The child goes on from what is stored, and acks only go forward.
                assert seq >= counts[stream], (stream, seq, counts[stream])
                assert seq > acked.get(stream, -1)
                acked[stream] = seq
        acknowledged_runs += bool(acks)
        counts = check_store(data_dir, acked, counts)
    assert acknowledged_runs >= KILLS * 3 // 4
    assert all(count > 0 for count in counts.values())
