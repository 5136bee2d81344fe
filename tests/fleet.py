# A generated fleet: guilds with a few small channels each, spread over shard directories.
#
# Shared by the reshard and fleet status tests and the reshard kill test's child. Every
# message holds a marker unique to its guild, so a scan of a directory's files tells
# whether any byte of a guild's messages is there.
from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import trio
from conftest import sealed_directory

from eva.core.events import ForgetApplied, ForgetRequested, MessagePosted
from eva.core.keys import StreamId
from eva.core.sealing import key_id
from eva.core.settings import MemorySettings
from eva.core.shards import shard_of
from eva.core.summarize import OfflineSummarizer
from eva.memory.build import Memory
from eva.store.event_store import Batch, EventStore
from eva.store.lmdb_kv import open_backend
from eva.store.replay import replay_stream

BUILD = MemorySettings(compress_at_bytes=256, tail_keep_bytes=64, quiet_ms=1)
START_MS = 1_700_000_000_000


@dataclass(frozen=True, slots=True)
class Fleet:
    guilds: list[int]
    streams: dict[int, list[StreamId]]  # guild -> its channels

    def owner(self, guild: int, dirs: list[Path]) -> Path:
        return dirs[shard_of(guild, len(dirs))]


def marker(guild: int) -> str:
    return f"gx{guild}qz"


def posts(stream: StreamId, count: int) -> list[MessagePosted]:
    return [
        MessagePosted(
            at_ms=START_MS + i * 60_000,
            index=i,
            message_id=(stream.channel_id << 8) + i,
            author_id=100 + i % 3,
            author_name=("Ann", "Bo", "Cy")[i % 3],
            content=f"{marker(stream.guild_id)} said thing {i} in channel {stream.channel_id}",
        )
        for i in range(count)
    ]


def generate(dirs: list[Path], guilds: int, seed: int = 7, built_every: int = 25) -> Fleet:
    """`guilds` guilds, each placed in the directory that owns it among `dirs`, with one to
    three channels of three to six messages; every `built_every`-th guild's channels also
    have their memory built (lines, a published row), and the first of them holds a
    finished forget (the record that must travel with the guild)."""
    rng = random.Random(seed)
    ids = sorted(rng.sample(range(1 << 20, 1 << 30), guilds))
    fleet = Fleet([], {})
    by_dir: dict[Path, list[Batch]] = {d: [] for d in dirs}
    built: list[tuple[Path, StreamId]] = []
    for number, base in enumerate(ids):
        guild = (base << 22) | rng.randrange(1 << 22)
        streams = [StreamId(guild, (guild >> 10) + c) for c in range(rng.randint(1, 3))]
        fleet.guilds.append(guild)
        fleet.streams[guild] = streams
        home = fleet.owner(guild, dirs)
        for stream in streams:
            by_dir[home].append(Batch(stream, posts(stream, rng.randint(3, 6))))
            if number % built_every == 0:
                built.append((home, stream))
    for directory, batches in by_dir.items():
        store = EventStore(open_backend(directory))
        store.append_many(batches)
    trio.run(_build, built)
    for directory in dirs:
        open_backend(directory).close()
        sealed_directory(directory)
    return fleet


async def _build(built: list[tuple[Path, StreamId]]) -> None:
    for number, (directory, stream) in enumerate(built):
        store = EventStore(open_backend(directory))
        if number == 0:
            person = "0" * 24
            store.append(
                stream,
                [
                    ForgetRequested(at_ms=START_MS, person_hash=person, by="self"),
                    ForgetApplied(at_ms=START_MS, person_hash=person),
                ],
            )
        await Memory(store, stream, OfflineSummarizer(), BUILD).build(START_MS + 86_400_000)


def digests(dirs: list[Path]) -> dict[StreamId, tuple[str, int, str]]:
    """Every stream of the directories: its replay digest, events and newest seal; a stream
    found twice fails."""
    found: dict[StreamId, tuple[str, int, str]] = {}
    for directory in dirs:
        backend = open_backend(directory)
        try:
            store = EventStore(backend)
            for meta in store.streams():
                stream = StreamId(meta.guild_id, meta.channel_id)
                result = replay_stream(store, stream)
                assert result.ok, result
                assert stream not in found, f"{stream} is stored twice"
                assert result.log is not None
                found[stream] = (result.rebuilt_digest, result.events, result.log.head)
        finally:
            backend.close()
    return found


def placement(dirs: list[Path]) -> dict[int, set[Path]]:
    """guild -> the directories holding streams of it."""
    held: dict[int, set[Path]] = {}
    for directory in dirs:
        backend = open_backend(directory)
        try:
            for meta in EventStore(backend).streams():
                held.setdefault(meta.guild_id, set()).add(directory)
        finally:
            backend.close()
    return held


def marks(guild: int) -> list[bytes]:
    """What shows that a directory's files hold some of a guild: its marker (in the clear,
    in a directory that does not seal) or the id of one of its people's keys, which every
    sealed message of theirs carries."""
    from eva.store.key_binding import ring_of
    from eva.store.key_store import open_key_store

    keys = open_key_store(create=True)
    assert keys is not None
    ring = ring_of(keys)
    ids = [key_id(ring.tag(guild), ring.hashes.recorded(author)) for author in (100, 101, 102)]
    return [marker(guild).encode(), *ids]


def markers_out_of_place(
    fleet: Fleet, shards: list[Path], old: Sequence[Path] = ()
) -> dict[Path, list[int]]:
    """Per directory of the shards (and of `old` ones, which own nothing), the guilds it
    does not own whose marks are in one of its files."""
    leaks: dict[Path, list[int]] = {}
    for directory in [*shards, *old]:
        blob = b"".join(path.read_bytes() for path in directory.rglob("*") if path.is_file())
        foreign = [
            g for g in fleet.guilds
            if fleet.owner(g, shards) != directory and any(mark in blob for mark in marks(g))
        ]
        if foreign:
            leaks[directory] = foreign
    return leaks
