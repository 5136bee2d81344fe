# People's data keys: one per person per server, in the key store, wrapped by its master key.
#
# Shell. The key store's `people` folder holds one file per server tag
# (eva.core.sealing.guild_tag): a msgpack record of the wrapped data key of each key
# id, and the ids of the keys destroyed (ids only, so that what they sealed reads as
# erased rather than as damage). A data key is wrapped with AES-GCM under a key
# derived from the master key, its id bound to it. Every change rewrites the file
# whole (temporary file, fsync, rename) under the folder's lock: the file that held
# a destroyed key is no longer part of the store, and no other process can lose a
# key another one made. A key is on disk before anything it seals is written.
from __future__ import annotations

import fcntl
import hashlib
import hmac
import os
import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import msgspec
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from eva.core.sealing import DATA_KEY_BYTES, GUILD_TAG_BYTES, KEY_ID_BYTES, NONCE_BYTES
from eva.store.key_store import KeyStoreError
from eva.store.private import private_dir, replace_private

PEOPLE_DIR = "people"
LOCK_FILE = ".lock"
_WRAP = b"eva-person-key-wrap-v1"


class _File(msgspec.Struct):
    """One server's keys: wrapped data key by key id, and the ids destroyed."""

    keys: dict[bytes, bytes] = msgspec.field(default_factory=dict)
    destroyed: list[bytes] = msgspec.field(default_factory=list)


_decode_file = msgspec.msgpack.Decoder(_File)
_encoder = msgspec.msgpack.Encoder()


class PersonKeys:
    """The data keys of the key store at `folder`'s parent: read, made and destroyed."""

    def __init__(self, store_path: Path, master: bytes) -> None:
        self.folder = store_path / PEOPLE_DIR
        self._wrap = AESGCM(hmac.new(master, _WRAP, hashlib.sha256).digest())
        # tag -> (the file's stat when read, its keys unwrapped, its destroyed ids)
        self._read: dict[bytes, tuple[tuple[int, int], dict[bytes, bytes], set[bytes]]] = {}

    def find(self, ids: Iterable[bytes]) -> dict[bytes, bytes | None]:
        """The data key of each id the store holds, or None for one it destroyed; an id it
        never held is left out."""
        found: dict[bytes, bytes | None] = {}
        read: dict[bytes, tuple[dict[bytes, bytes], set[bytes]]] = {}  # each file once a call
        for key_id in ids:
            tag = key_id[:GUILD_TAG_BYTES]
            held = read.get(tag)
            if held is None:
                held = read[tag] = self._of(tag)
            keys, destroyed = held
            if key_id in keys:
                found[key_id] = keys[key_id]
            elif key_id in destroyed:
                found[key_id] = None
        return found

    def make(self, ids: Iterable[bytes]) -> dict[bytes, bytes | None]:
        """The data key of each id, made (and on disk) for those the store never held;
        None for one it destroyed (a person forgotten gets no key again under that id)."""
        wanted = list(dict.fromkeys(ids))
        found = self.find(wanted)
        missing = [key_id for key_id in wanted if key_id not in found]
        by_tag: dict[bytes, list[bytes]] = {}
        for key_id in missing:
            by_tag.setdefault(key_id[:GUILD_TAG_BYTES], []).append(key_id)
        for tag, made in by_tag.items():
            with self._changing(tag) as held:
                for key_id in made:
                    if key_id not in held.keys and key_id not in held.destroyed:
                        fresh = secrets.token_bytes(DATA_KEY_BYTES)
                        held.keys[key_id] = self._wrapped(key_id, fresh)
            found.update(self.find(made))
        return found

    def destroy(self, ids: Iterable[bytes]) -> int:
        """Destroy the data keys of `ids` for good; how many the store held."""
        by_tag: dict[bytes, list[bytes]] = {}
        for key_id in dict.fromkeys(ids):
            by_tag.setdefault(key_id[:GUILD_TAG_BYTES], []).append(key_id)
        gone = 0
        for tag, doomed in by_tag.items():
            with self._changing(tag) as held:
                for key_id in doomed:
                    gone += held.keys.pop(key_id, None) is not None
                    if key_id not in held.destroyed:
                        held.destroyed.append(key_id)
        return gone

    def destroy_server(self, tag: bytes) -> int:
        """Destroy every data key of the server tagged `tag`; how many there were."""
        with self._changing(tag) as held:
            gone = len(held.keys)
            held.destroyed.extend(key_id for key_id in held.keys if key_id not in held.destroyed)
            held.keys.clear()
        return gone

    def census(self) -> tuple[int, int, int]:
        """(servers, keys held, keys destroyed) of the store, from its files (no key is
        unwrapped)."""
        servers = held = destroyed = 0
        for path in sorted(self.folder.glob("*.keys")) if self.folder.is_dir() else []:
            record = self._load(path)
            servers += 1
            held += len(record.keys)
            destroyed += len(record.destroyed)
        return servers, held, destroyed

    def _file(self, tag: bytes) -> Path:
        return self.folder / f"{tag.hex()}.keys"

    def _of(self, tag: bytes) -> tuple[dict[bytes, bytes], set[bytes]]:
        """A server's keys as its file holds them now (read again when it changed: another
        process may have made or destroyed one)."""
        cached = self._read.get(tag)
        path = self._file(tag)
        try:
            stat = path.stat()
        except FileNotFoundError:
            self._read.pop(tag, None)
            return {}, set()
        except OSError as error:
            raise _unreadable(path, error) from None
        mark = (stat.st_mtime_ns, stat.st_size)
        if cached is not None and cached[0] == mark:
            return cached[1], cached[2]
        held = self._load(path)
        keys = {
            key_id: self._unwrapped(path, key_id, wrapped) for key_id, wrapped in held.keys.items()
        }
        destroyed = set(held.destroyed)
        self._read[tag] = (mark, keys, destroyed)
        return keys, destroyed

    def _load(self, path: Path) -> _File:
        try:
            return _decode_file.decode(path.read_bytes())
        except FileNotFoundError:
            return _File()
        except (msgspec.DecodeError, msgspec.ValidationError):
            raise KeyStoreError(
                f"the key store's {path} is damaged: restore it from a backup"
            ) from None
        except OSError as error:
            raise _unreadable(path, error) from None

    def _wrapped(self, key_id: bytes, data_key: bytes) -> bytes:
        nonce = secrets.token_bytes(NONCE_BYTES)
        return nonce + self._wrap.encrypt(nonce, data_key, key_id)

    def _unwrapped(self, path: Path, key_id: bytes, wrapped: bytes) -> bytes:
        if len(key_id) != KEY_ID_BYTES:
            raise KeyStoreError(f"the key store's {path} is damaged: a key id of the wrong size")
        try:
            return self._wrap.decrypt(wrapped[:NONCE_BYTES], wrapped[NONCE_BYTES:], key_id)
        except InvalidTag:
            raise KeyStoreError(
                f"a key in {path} does not open with this master key: the file was altered, "
                "or belongs to another key store"
            ) from None

    @contextmanager
    def _changing(self, tag: bytes) -> Iterator[_File]:
        """A server's keys to change, read under the folder's lock and written back whole."""
        try:
            private_dir(self.folder)
            descriptor = os.open(self.folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as error:
            raise KeyStoreError(
                f"the key store's {self.folder} cannot be written ({error.strerror}): nothing "
                "is stored until it can"
            ) from None
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX)
            path = self._file(tag)
            held = self._load(path)
            yield held
            try:
                replace_private(path, _encoder.encode(held))
            except OSError as error:
                raise KeyStoreError(
                    f"the key store's {path} cannot be written ({error.strerror}): nothing is "
                    "stored until it can"
                ) from None
            self._read.pop(tag, None)
        finally:
            os.close(descriptor)


def _unreadable(path: Path, error: OSError) -> KeyStoreError:
    return KeyStoreError(f"the key store's {path} cannot be read: {error.strerror or error}")
