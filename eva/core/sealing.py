# Sealed fields: what a stored event says of people, encrypted with their own keys.
#
# Pure (the nonce and the keys are given). An event that holds people's words or
# names keeps them in one blob, laid out as
#
#     version (1 byte) | n (2 bytes) | the server's tag (4 bytes)
#     | the person part of n key ids (6 bytes each) | nonce (12 bytes)
#     | AES-256-GCM ciphertext of the fields (msgpack) and its 16-byte tag
#
# The key ids name whose data keys seal the blob: each person has one per server
# (eva.store.person_keys keeps them, outside the data directory). A blob sealed for
# one person uses their data key; one sealed for several (a line that credits many)
# uses a key derived from all of their data keys in key id order, so that losing any
# one of them loses the blob. A key id is the server's tag (a keyed hash of its id:
# the key store keeps one file of keys per tag) then a hash of the person's keyed
# forget hash; never an id in the clear.
from __future__ import annotations

import hashlib
import struct
from collections.abc import Callable, Sequence
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

VERSION: Final = 1
GUILD_TAG_BYTES: Final = 4
KEY_ID_BYTES: Final = 10
NONCE_BYTES: Final = 12
DATA_KEY_BYTES: Final = 32
MAX_KEYS: Final = 65535
_COUNT = struct.Struct(">H")
_IDS_AT: Final = 1 + _COUNT.size  # where the key ids start: the server's tag, then people
SERVER: Final = 0
"""The person id whose key seals what belongs to a server rather than to one person (its
channels' names, the tools Eva called, the grounding of her replies)."""
_U64 = struct.Struct(">Q")
_LINE_KEY = b"eva-sealed-for-several-v1"


class SealError(ValueError):
    """A blob that is not a sealed blob, or whose keys do not open it."""


def guild_tag(secret: bytes, guild_id: int) -> bytes:
    """The tag of a server: the start of its people's key ids."""
    return hashlib.blake2b(_U64.pack(guild_id), key=secret, digest_size=GUILD_TAG_BYTES).digest()


def key_id(tag: bytes, person_hash: str, generation: int = 0) -> bytes:
    """The id of a person's data key in the server tagged `tag`, from their (keyed) forget
    hash. A person whose key was destroyed (forgotten) and who writes again gets the key
    of the next generation."""
    named = person_hash.encode() + (b"#%d" % generation if generation else b"")
    person = hashlib.blake2b(tag + named, digest_size=KEY_ID_BYTES - len(tag))
    return tag + person.digest()


def key_ids_of(blob: bytes) -> tuple[bytes, ...]:
    """The ids of the keys that seal `blob`."""
    end = _ids_end(blob)
    if len(blob) < end + NONCE_BYTES + 16:
        raise SealError("a sealed blob cut short")
    return split_ids(blob[_IDS_AT:end])


def _ids_end(blob: bytes) -> int:
    """Where the key ids of `blob` end (its nonce starts)."""
    if len(blob) < _IDS_AT or blob[0] != VERSION:
        raise SealError("not a sealed blob of a known version")
    count: int = _COUNT.unpack_from(blob, 1)[0]
    return _IDS_AT + GUILD_TAG_BYTES + count * (KEY_ID_BYTES - GUILD_TAG_BYTES)


def sealing_key(data_keys: Sequence[bytes]) -> bytes:
    """The AES key of a blob sealed for the people whose data keys are `data_keys`, given
    in the order of their key ids: the one key itself, else a hash of them all."""
    if len(data_keys) == 1:
        return data_keys[0]
    return hashlib.sha256(_LINE_KEY + b"".join(data_keys)).digest()


def header(ids: Sequence[bytes]) -> bytes:
    """What a blob sealed for the keys `ids` (sorted, each once, of one server) starts
    with."""
    if not 1 <= len(ids) <= MAX_KEYS:
        raise SealError(f"a blob is sealed for 1 to {MAX_KEYS} keys, not {len(ids)}")
    return bytes((VERSION,)) + _COUNT.pack(len(ids)) + join_ids(ids)


def join_ids(ids: Sequence[bytes]) -> bytes:
    """Key ids of one server as a blob holds them: the server's tag once, then the person
    part of each (`split_ids` undoes it)."""
    tag = ids[0][:GUILD_TAG_BYTES]
    if any(key_id[:GUILD_TAG_BYTES] != tag for key_id in ids):
        raise SealError("a blob is sealed with keys of one server only")
    return tag + b"".join(key_id[GUILD_TAG_BYTES:] for key_id in ids)


def seal(
    ids: Sequence[bytes], cipher: AESGCM, nonce: bytes, fields: bytes, aad: bytes
) -> bytes:
    """The blob of `fields` sealed for the keys `ids` (sorted, each once), with `cipher`
    made from their `sealing_key`."""
    return header(ids) + nonce + cipher.encrypt(nonce, fields, aad)


def open_blob(blob: bytes, cipher_of: Callable[[bytes], AESGCM], aad: bytes) -> bytes:
    """The fields a blob seals, opened with the cipher `cipher_of` gives for its key ids,
    given as they stand in the blob (`join_ids`; it raises if a key is not there);
    SealError if the blob was altered."""
    start = _ids_end(blob)
    try:
        cipher = cipher_of(blob[_IDS_AT:start])
        return cipher.decrypt(blob[start : start + NONCE_BYTES], blob[start + NONCE_BYTES :], aad)
    except InvalidTag:
        raise SealError("a sealed blob does not open with its keys: altered or damaged") from None


def split_ids(block: bytes) -> tuple[bytes, ...]:
    """The key ids of a blob, from the ids as they stand in it (`join_ids`)."""
    tag, part = block[:GUILD_TAG_BYTES], KEY_ID_BYTES - GUILD_TAG_BYTES
    return tuple(tag + block[at : at + part] for at in range(GUILD_TAG_BYTES, len(block), part))
