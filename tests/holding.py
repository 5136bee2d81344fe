# What a data directory still holds of given texts: in its files as they are, or in its
# log read with the keys (what `eva verify-erased` looks through as well).
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import lmdb
import msgspec

from eva.core.events import decode_event, use_opener
from eva.store.key_binding import ring_of
from eva.store.key_store import open_key_store
from eva.store.lmdb_kv import open_backend_to_read


def file_bytes(directory: Path) -> bytes:
    """Every byte of every file under `directory`."""
    return b"".join(
        (Path(root) / name).read_bytes() for root, _, names in os.walk(directory) for name in names
    )


def opened_texts(directory: Path) -> str:
    """Every text of every event of the directory's log, opened with the tests' key store
    (read in place: nothing is written in the directory, not even a lock file)."""
    if not (directory / "data.mdb").exists():
        return ""
    key_store = open_key_store(create=True)
    assert key_store is not None
    use_opener(ring_of(key_store).open)
    texts: list[str] = []
    already = open_backend_to_read(directory)
    if already is not None:  # LMDB opens an environment once in a process
        with already.reading() as tables:
            for _, data in tables.scan("events", b"", b"\xff" * 32):
                texts.extend(_strings(msgspec.to_builtins(decode_event(data))))
        return "\n".join(texts)
    env = lmdb.open(str(directory), readonly=True, lock=False, max_dbs=64)
    try:
        with env.begin() as txn:
            if txn.get(b"events") is None:
                return ""
            for _, data in txn.cursor(db=env.open_db(b"events", txn=txn)):
                texts.extend(_strings(msgspec.to_builtins(decode_event(data))))
    finally:
        env.close()
    return "\n".join(texts)


def held(directory: Path, needles: Iterable[str]) -> set[str]:
    """The needles the directory holds: in the bytes of its files, or in its log opened."""
    blob, opened = file_bytes(directory), opened_texts(directory)
    return {needle for needle in needles if needle.encode() in blob or needle in opened}


def _strings(value: object) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)
