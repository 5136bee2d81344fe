# Crash safety of the live path: SIGKILL a process ingesting chat while compression runs.
#
# `live_child.py` feeds three channels through the supervisor and acknowledges
# each message on stdout once `ask(Post)` returned. After every kill this test
# reopens the data directory (closing the backend after each check, because
# `open_backend` caches one environment per path in this process) and asserts:
# every acknowledged message is stored at the index it was acknowledged with;
# messages and events have no gaps; no line address was written twice; the
# projections equal a replay. A last clean run only resumes the unfinished
# work; after it no merge is left ready.
from __future__ import annotations

import random
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
from killing import child_env, kill_while_running
from live_child import STREAMS, expected_post, unfinished

from eva.core.events import LineWritten, MessagePosted, RowPublished
from eva.core.keys import StreamId
from eva.store import lmdb_kv
from eva.store.event_store import EventStore
from eva.store.replay import replay_stream

CHILD = Path(__file__).with_name("live_child.py")
KILLS = 14  # the long run is scripts/crash_suite.py
SEED = 20240918
TIME_ALLOWED_S = 55.0


@dataclass(frozen=True, slots=True)
class Ack:
    stream: StreamId
    message_id: int
    index: int


@dataclass(slots=True)
class Seen:
    """What the checks found in one stream."""

    messages: int = 0
    lines: int = 0
    publishes: int = 0


def parse_acks(output: bytes) -> list[Ack]:
    """The acknowledgement lines the child finished writing, in order."""
    acks = []
    for line in output.split(b"\n")[:-1]:  # a last line without its newline was cut short
        word, guild, channel, message_id, index = line.decode().split()
        assert word == "ack", line
        acks.append(Ack(StreamId(int(guild), int(channel)), int(message_id), int(index)))
    return acks


def run_and_kill(data_dir: Path, seed: int, rng: random.Random) -> list[Ack]:
    """Start a child, kill it at a random moment, and return what it acknowledged."""
    args = [str(CHILD), str(data_dir), str(seed)]
    return parse_acks(kill_while_running(args, rng, early_s=0.3, after_ack_s=(0.05, 0.6)))


def check_store(data_dir: Path, acked: dict[StreamId, dict[int, int]]) -> dict[StreamId, Seen]:
    """Assert every acknowledged message is stored, without gaps or lines written twice."""
    backend = lmdb_kv.open_backend(data_dir)
    try:
        store = EventStore(backend)
        seen = {}
        for stream in STREAMS:
            seqs: list[int] = []
            indexes: list[int] = []
            addresses: list[tuple[int, int]] = []
            publishes = 0
            for seq, event in store.events(stream):
                seqs.append(seq)
                if isinstance(event, MessagePosted):
                    post = expected_post(stream, event.index)
                    assert (event.message_id, event.at_ms, event.author_name, event.content) == (
                        post.message_id,
                        post.at_ms,
                        post.author_name,
                        post.content,
                    ), (stream, event.index)
                    indexes.append(event.index)
                elif isinstance(event, LineWritten):
                    addresses.append((event.start, event.size))
                elif isinstance(event, RowPublished):
                    publishes += 1
            assert seqs == list(range(len(seqs))), f"{stream}: a gap in the sequence numbers"
            assert indexes == list(range(len(indexes))), f"{stream}: a gap in the messages"
            twice = {a for a in addresses if addresses.count(a) > 1}
            assert not twice, f"{stream}: lines written twice: {sorted(twice)}"
            for message_id, index in acked.get(stream, {}).items():
                assert store.index_of(stream, message_id) == index, (stream, message_id, index)
            meta = store.meta(stream)
            stored = (0, 0) if meta is None else (meta.position, meta.messages)
            assert stored == (len(seqs), len(indexes))
            result = replay_stream(store, stream)
            assert result.ok, result
            seen[stream] = Seen(len(indexes), len(addresses), publishes)
        return seen
    finally:
        backend.close()


def finish(data_dir: Path) -> None:
    """Run the child once more, only to resume the unfinished work; it must exit 0."""
    done = subprocess.run(
        [sys.executable, str(CHILD), str(data_dir), "0", "--finish"],
        capture_output=True,
        env=child_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b"finished\n"


@pytest.mark.slow
def test_killed_live_ingest_loses_nothing_acknowledged(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    data_dir = tmp_path / "data"
    acked: dict[StreamId, dict[int, int]] = {}
    seen = {stream: Seen() for stream in STREAMS}
    acknowledged_runs = 0
    deadline = time.monotonic() + TIME_ALLOWED_S
    for run in range(KILLS):
        assert time.monotonic() < deadline, f"only {run} kills in the time allowed"
        acks = run_and_kill(data_dir, seed=SEED + run, rng=rng)
        for ack in acks:
            # The child goes on from what is stored.
            assert ack.index >= seen[ack.stream].messages, ack
            acked.setdefault(ack.stream, {})[ack.message_id] = ack.index
        acknowledged_runs += bool(acks)
        seen = check_store(data_dir, acked)
    assert acknowledged_runs >= KILLS * 3 // 4
    for stream in STREAMS:
        assert seen[stream].lines > 0 and seen[stream].publishes > 0, (stream, seen[stream])

    finish(data_dir)
    check_store(data_dir, acked)
    backend = lmdb_kv.open_backend(data_dir)
    try:
        for meta in EventStore(backend).streams():
            assert meta.ready == 0, meta
            assert not unfinished(meta), meta
    finally:
        backend.close()
