# The key store: Eva's secrets, kept outside every data directory.
#
# Shell: files under one directory, `~/.config/eva/keys` unless EVA_KEYS names another (a
# mounted Secret or volume in a deployment). It holds the master key (32 random bytes in
# base64; EVA_MASTER_KEY may give it instead, so that the files alone are not enough)
# and a record naming the store by an id derived from that key, which tells a wrong
# master key from the right one (and makes the pods given one master key one store).
# What the data directory keeps keyed by it (the hashed ids forgets are recorded under)
# is worthless to whoever has the data files alone.
# Invariants: a store is created only when asked, never over one that exists; a data
# directory bound to a store (eva.store.key_binding) is never given another or a new one;
# every file is written whole (temporary file, fsync, rename) and readable by its owner only.
from __future__ import annotations

import base64
import binascii
import fcntl
import hashlib
import hmac
import os
import secrets
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import msgspec

from eva.core.forget import PersonHashes
from eva.store.private import private_dir, replace_private

KEYS_ENV = "EVA_KEYS"
MASTER_ENV = "EVA_MASTER_KEY"
MASTER_FILE = "master.key"
STORE_FILE = "store.json"
LOCK_FILE = ".lock"
MASTER_BYTES = 32
_ID = b"eva-key-store-id-v1"
_FORGET_HASH = b"eva-forget-hash-v2"


class KeyStoreError(Exception):
    """A key store that is missing, unreadable or not the one the data was written with;
    the message names it and says what to do."""


class _Record(msgspec.Struct, frozen=True):
    id: str  # derived from the master key: the same master key, the same store
    version: int = 1


@dataclass(frozen=True)
class KeyStore:
    """An open key store: where it is, its id, and what is derived from its master key."""

    path: Path
    id: str
    master: bytes

    def person_hashes(self) -> PersonHashes:
        """How forgets are recorded with this store: ids hashed with a secret of its own."""
        return PersonHashes(hmac.new(self.master, _FORGET_HASH, hashlib.sha256).digest())


def default_path() -> Path:
    """Where the key store is: EVA_KEYS, else $XDG_CONFIG_HOME/eva/keys (~/.config/eva/keys),
    beside the settings file."""
    given = os.environ.get(KEYS_ENV, "").strip()
    if given:
        return Path(given).expanduser()
    base = os.environ.get("XDG_CONFIG_HOME", "").strip()
    return (Path(base) if base else Path.home() / ".config") / "eva" / "keys"


def store_id(master: bytes) -> str:
    """The id of the key store a master key makes: stores given the same master key (each
    pod of a deployment, from one Secret) are one store."""
    return hmac.new(master, _ID, hashlib.sha256).hexdigest()[:16]


def given_store_id() -> str | None:
    """The id of the key store EVA_MASTER_KEY makes, if it is given (and well formed)."""
    try:
        master = _master_from_env()
    except KeyStoreError:
        return None
    return None if master is None else store_id(master)


def _master_from_env() -> bytes | None:
    given = os.environ.get(MASTER_ENV, "").strip()
    if not given:
        return None
    try:
        master = base64.b64decode(given, validate=True)
    except (binascii.Error, ValueError):
        master = b""
    if len(master) != MASTER_BYTES:
        raise KeyStoreError(
            f"{MASTER_ENV} must be {MASTER_BYTES} bytes in base64 (44 characters), as the "
            f"key store's {MASTER_FILE} holds it; it is not"
        )
    return master


def open_key_store(path: Path | None = None, *, create: bool = False) -> KeyStore | None:
    """The key store at `path` (default_path() if None); None if there is none and not
    `create`. Created with a one-line notice on standard error when `create` and absent.

    A KeyStoreError if it is there but cannot be read, is incomplete, or its master key
    (from the file or EVA_MASTER_KEY) is not the one it was made with.
    """
    where = default_path() if path is None else path
    record_file = where / STORE_FILE
    try:
        if not record_file.exists():
            if not create:
                return None
            return _create(where)
        record = msgspec.json.decode(record_file.read_bytes(), type=_Record)
        master = _master_from_env() or _read_master(where)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        raise KeyStoreError(f"the key store's record {record_file} is damaged ({error})") from None
    except PermissionError:
        raise KeyStoreError(f"the key store at {where} cannot be read: no permission") from None
    except OSError as error:
        why = error.strerror or error
        raise KeyStoreError(f"the key store at {where} cannot be read: {why}") from None
    if not hmac.compare_digest(store_id(master), record.id):
        source = MASTER_ENV if os.environ.get(MASTER_ENV, "").strip() else str(where / MASTER_FILE)
        raise KeyStoreError(
            f"the master key in {source} is not the one the key store at {where} was made "
            "with: nothing can be read with it. Give the right one (from where you keep it)"
        )
    return KeyStore(where, record.id, master)


def _read_master(where: Path) -> bytes:
    file = where / MASTER_FILE
    if not file.exists():
        raise KeyStoreError(
            f"the key store at {where} has no master key ({file}, or {MASTER_ENV}): restore "
            "it from where you keep it. A new one would not read what the old one keeps"
        )
    try:
        master = base64.b64decode(file.read_bytes().strip(), validate=True)
    except (binascii.Error, ValueError):
        master = b""
    if len(master) != MASTER_BYTES:
        raise KeyStoreError(f"the master key {file} is damaged: it is not 32 bytes in base64")
    return master


def _create(where: Path) -> KeyStore:
    try:
        private_dir(where)
        with _creating(where):
            if (where / STORE_FILE).exists():  # another process made it meanwhile
                made = open_key_store(where)
                assert made is not None
                return made
            master = _master_from_env()
            if master is None:
                master = secrets.token_bytes(MASTER_BYTES)
                replace_private(where / MASTER_FILE, base64.b64encode(master) + b"\n")
            record = _Record(id=store_id(master))
            replace_private(where / STORE_FILE, msgspec.json.encode(record))
    except OSError as error:
        raise KeyStoreError(
            f"the key store at {where} cannot be created ({error.strerror or error}): set "
            f"{KEYS_ENV} to a directory this user may write"
        ) from None
    print(
        f"eva: created the key store at {where}, apart from the data directory. Back it "
        "up apart from the data: a data directory keyed with it is not opened without it",
        file=sys.stderr,
    )
    return KeyStore(where, record.id, master)


@contextmanager
def _creating(where: Path) -> Iterator[None]:
    """Hold the store's creation lock: processes starting at once make one store."""
    descriptor = os.open(where / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)
