# A forget killed at any step and resumed ends exactly where an uninterrupted forget ends.
#
# The parent builds one data directory (two channels, four people, a unique
# marker in every message), copies it per step, and runs `forget_child.py`,
# which is `eva forget --user` with a SIGKILL at one step: after the
# tombstone, during the remaking of lines, during the rewrite of the log,
# during the compacting copy, and just before or just after the copy replaces
# the data file. Then `eva forget --resume` runs in this process and the end
# state is compared with a reference forget that was never interrupted.
# Events written at different times differ in their `at_ms`, and a resumed
# forget may append a few more bookkeeping events (so sequence numbers and
# projection digests differ); the comparison is therefore of a normalised
# view: every message, every current line, the published row, the memory
# block, the stream counts and the audit events (tombstone, erasure, applied
# with its counts). A resumed forget publishes the same row once more, which is
# why sequence numbers differ. SIGKILL tests a process crash, not a power cut.
from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
from conftest import key_store_of_its_own, keyed, keyed_hash
from forget_child import NOT_REACHED, STEPS
from killing import child_env
from test_forget import PEOPLE, SETTINGS, STREAMS, chat, marker, markers_in_files

from eva.cli.main import main as eva_main
from eva.core import keys
from eva.core.events import ForgetApplied, ForgetRequested, MessagesErased
from eva.core.keys import StreamId
from eva.core.summarize import OfflineSummarizer
from eva.memory.build import Memory
from eva.memory.view import memory_text
from eva.store.event_store import EventStore, read_line
from eva.store.lmdb_kv import COMPACT_DIR, open_backend
from eva.store.replay import replay_stream

CHILD = Path(__file__).with_name("forget_child.py")
FORGOTTEN = 202
MESSAGES = 160
BUILT_AT_MS = 1_800_000_000_000
CHILD_TIMEOUT_S = 60


def everyones_markers() -> dict[int, list[str]]:
    posts = [post for stream in STREAMS for post in chat(stream, MESSAGES)]
    return {p: [marker(p, m.index) for m in posts if m.author_id == p] for p in PEOPLE}


async def build(data: Path) -> None:
    store = keyed(EventStore(open_backend(data)))  # sealed, as a command leaves it
    try:
        for stream in STREAMS:
            store.append(stream, chat(stream, MESSAGES))
            await Memory(store, stream, OfflineSummarizer(), SETTINGS).build(BUILT_AT_MS)
    finally:
        store.backend.close()  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A built data directory and the settings file it was built with (never changed)."""
    base = tmp_path_factory.mktemp("forget-crash")
    trio.run(build, base / "data")
    table = "\n".join(f"{k} = {json.dumps(v)}" for k, v in msgspec.to_builtins(SETTINGS).items())
    (base / "memory.toml").write_text(f"[memory]\n{table}\n")
    return base


def run_child(data: Path, step: str, settings: Path) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, str(CHILD), str(data), step, str(FORGOTTEN), str(settings)]
    return subprocess.run(command, capture_output=True, env=child_env(), timeout=CHILD_TIMEOUT_S)


def eva(*argv: str, data: Path) -> int:
    """Run `eva ARGV --data DATA` in this process and close the data directory after."""
    try:
        return eva_main([*argv, "--data", str(data)])
    finally:
        open_backend(data).close()


def end_state(data: Path) -> dict[str, Any]:
    """Everything a forget decides, without times of writing and sequence numbers."""
    backend = open_backend(data)
    try:
        store = keyed(EventStore(backend), write=False)
        view: dict[str, Any] = {}
        for meta in store.streams():
            stream = StreamId(meta.guild_id, meta.channel_id)
            replayed = replay_stream(store, stream)
            assert replayed.ok, replayed
            counts = msgspec.structs.asdict(meta)
            for moving in ("position", "row_seq", "lines"):
                del counts[moving]
            counts["forgotten"] = sorted(counts["forgotten"])  # who, not when it was written
            messages = []
            for index in range(meta.messages):
                message = store.message(stream, index)
                assert message is not None
                posted = msgspec.structs.replace(message.posted, at_ms=0)
                messages.append((posted, message.content, message.attachments, message.deleted))
            prefix = keys.stream_prefix(stream)
            with backend.reading() as tables:
                addresses = [
                    keys.address_of_line_key(key)
                    for key, _ in tables.scan("lines", prefix, keys.prefix_end(prefix))
                ]
                lines = [read_line(tables, stream, *address) for address in addresses]
            row = store.published_row(stream)
            assert row is not None
            audit = [
                msgspec.structs.replace(event, at_ms=0)
                for _, event in store.events(stream)
                if isinstance(event, ForgetRequested | MessagesErased | ForgetApplied)
            ]
            view[str(stream)] = {
                "counts": counts,
                "messages": messages,
                "lines": [msgspec.structs.replace(line, at_ms=0) for line in lines if line],
                "row": msgspec.structs.replace(row, at_ms=0),
                "memory": memory_text(store, stream, SETTINGS),
                "audit": audit,
            }
        return view
    finally:
        backend.close()


@pytest.fixture(scope="module")
def reference(prepared: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    data = tmp_path_factory.mktemp("forget-reference") / "data"
    shutil.copytree(prepared / "data", data)
    with key_store_of_its_own(data.parent / "keys"):  # the forget destroys keys in it
        child = run_child(data, "none", prepared / "memory.toml")
        assert child.returncode == 0, child.stderr.decode()
        return end_state(data)


@pytest.mark.slow
@pytest.mark.parametrize("step", STEPS[1:])
def test_a_killed_forget_resumes_to_the_uninterrupted_end(
    step: str, prepared: Path, reference: dict[str, Any], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    shutil.copytree(prepared / "data", data)
    markers = everyones_markers()
    settings = str(prepared / "memory.toml")

    child = run_child(data, step, prepared / "memory.toml")
    assert child.returncode != NOT_REACHED, f"the child never reached {step}"
    assert child.returncode == -signal.SIGKILL, child.stderr.decode()
    # A copy was left half made or whole, not swapped in (the next writer removes it).
    assert (data / COMPACT_DIR / "data.mdb").exists() == (step in ("copy", "before_swap"))
    reading = keyed(EventStore(open_backend(data)), write=False)
    forgetting = [meta.forgetting for meta in reading.streams()]
    open_backend(data).close()
    # The kill left work to do: the forget is pending in every channel it touches.
    assert forgetting == [[keyed_hash(FORGOTTEN)]] * len(STREAMS)

    assert eva("forget", "--resume", "--settings", settings, data=data) == 0

    assert markers_in_files(data, markers[FORGOTTEN]) == set()
    for person in PEOPLE.keys() - {FORGOTTEN}:
        assert markers_in_files(data, markers[person]) == set(markers[person])
    assert not (data / COMPACT_DIR).exists()
    state = end_state(data)
    for stream in state.values():
        assert stream["counts"]["forgetting"] == [] and stream["counts"]["stale"] == 0
    assert state == reference

    # Running the forget again finds nothing to do and changes nothing.
    assert eva("forget", "--user", str(FORGOTTEN), "--settings", settings, data=data) == 0
    assert end_state(data) == state


def test_the_reference_forget_erased_the_person(reference: dict[str, Any]) -> None:
    forgotten = {p: PEOPLE[p] for p in PEOPLE if p == FORGOTTEN}
    posted = [p for stream in STREAMS for p in chat(stream, MESSAGES) if p.author_id in forgotten]
    assert sum(1 for s in reference.values() for m in s["messages"] if m[3]) == len(posted)
    for stream in reference.values():
        # an erased message keeps neither words nor who wrote it
        erased = [m for m in stream["messages"] if m[3]]
        assert erased and all(m[1] == "" and m[0].author_name == "" for m in erased)
        assert {m[0].author_id for m in erased} == {0}
        kept = [m for m in stream["messages"] if not m[3]]
        assert all(m[1].startswith(f"mk{m[0].author_id}x") for m in kept)
        assert not any(m[0].author_id in forgotten for m in kept)
        assert "mk202x" not in stream["memory"] and "mk101x" in stream["memory"]
