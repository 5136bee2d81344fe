# The key ring: seals events for the people they belong to, and opens them again.
#
# Shell: reads and makes people's data keys in the key store (eva.store.person_keys)
# and keeps the ciphers it made. One ring per process and key store; the store it is
# bound to seals what it writes with it (EventStore.ring) and `decode_event` opens
# with it (eva.core.events.use_opener). An event sealed with a key the store
# destroyed opens erased (its sealed fields blank); one sealed with a key the store
# never held is an error that names the key store, never a silent blank.
from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Sequence

import msgspec
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from eva.core.events import AnyEvent, MessageEdited, SealedWithoutKeys
from eva.core.sealed_events import (
    associated,
    is_sealable,
    opened,
    people_of,
    secret_fields,
    skeleton,
)
from eva.core.sealing import (
    KEY_ID_BYTES,
    NONCE_BYTES,
    SealError,
    guild_tag,
    header,
    join_ids,
    key_id,
    open_blob,
    sealing_key,
    split_ids,
)
from eva.store.key_store import KeyStore
from eva.store.person_keys import PersonKeys

_TAG = b"eva-guild-tag-v1"
_MOST_CACHED = 1 << 16
_MOST_SEVERAL = 1 << 10


class _Destroyed(Exception):
    """A blob's keys include one the store destroyed."""


class KeyRing:
    """People's keys of one key store, as this process seals and opens with them."""

    def __init__(self, key_store: KeyStore) -> None:
        self.store_id = key_store.id
        self.people = PersonKeys(key_store.path, key_store.master)
        self.hashes = key_store.person_hashes()
        self._tag_secret = hmac.new(key_store.master, _TAG, hashlib.sha256).digest()
        self._tags: dict[int, bytes] = {}
        self._current: dict[tuple[int, int], bytes] = {}
        self._ciphers: dict[bytes, AESGCM] = {}  # by the key ids as a blob holds them
        self._several: dict[bytes, AESGCM] = {}  # of blobs sealed for more than one

    def tag(self, guild_id: int) -> bytes:
        """The server's tag: the start of its people's key ids, the name of their file."""
        found = self._tags.get(guild_id)
        if found is None:
            found = self._tags[guild_id] = guild_tag(self._tag_secret, guild_id)
        return found

    def ids_of(self, guild_id: int, person_hash: str) -> list[bytes]:
        """Every key id a person has had in a server (one per generation), that the store
        holds or destroyed."""
        tag, ids = self.tag(guild_id), list[bytes]()
        while True:
            candidate = key_id(tag, person_hash, len(ids))
            if candidate not in self.people.find([candidate]):
                return ids
            ids.append(candidate)

    def seal_events(
        self, guild_id: int, events: Sequence[AnyEvent], edited_author: Callable[[int], int]
    ) -> list[AnyEvent]:
        """The events as stored: each that holds people's words or names sealed for them
        (an edit for the author `edited_author` gives of the message index it edits), its
        keys made first and on disk."""
        owners = [
            people_of(event, _author_of(event, edited_author)) if is_sealable(event) else ()
            for event in events
        ]
        ids = self._person_ids(guild_id, {person for persons in owners for person in persons})
        nonces = secrets.token_bytes(NONCE_BYTES * len(events))  # one draw for the batch
        # the header and cipher of each set of people, made once a batch
        made: dict[tuple[int, ...], tuple[bytes, AESGCM]] = {}
        sealed: list[AnyEvent] = []
        for event, persons in zip(events, owners, strict=True):
            if not is_sealable(event):
                sealed.append(event)
                continue
            found = made.get(persons)
            if found is None:
                key_ids = tuple(sorted({ids[person] for person in persons}))
                found = made[persons] = (header(key_ids), self._cipher(join_ids(key_ids)))
            start, cipher = found
            at = len(sealed) * NONCE_BYTES
            nonce = nonces[at : at + NONCE_BYTES]
            blob = start + nonce + cipher.encrypt(nonce, secret_fields(event), associated(event))
            sealed.append(skeleton(event, blob))
        return sealed

    def open(self, event: AnyEvent) -> AnyEvent:
        """The event with its sealed fields back; blank if a key that sealed it was
        destroyed. SealedWithoutKeys if a key is not in the store, msgspec.DecodeError if
        the blob was altered."""
        if not is_sealable(event):
            return event
        try:
            fields = open_blob(event.sealed, self._cipher, associated(event))
        except _Destroyed:
            return opened(event, None)
        except SealError as error:  # altered or damaged: the log's seals say where
            raise msgspec.DecodeError(str(error)) from None
        return opened(event, fields)

    def destroy_person(self, guild_id: int, person_hash: str) -> int:
        """Destroy every key the person (by their forget hash) has had in the server, for
        good; how many the store held. What they sealed reads as erased from then on, in
        this directory and in every copy of it."""
        gone = self.people.destroy(self.ids_of(guild_id, person_hash))
        self.forget_ciphers()
        return gone

    def destroy_server(self, guild_id: int) -> int:
        """Destroy the keys of everyone in the server; how many there were."""
        gone = self.people.destroy_server(self.tag(guild_id))
        self.forget_ciphers()
        return gone

    def forget_ciphers(self) -> None:
        """Drop the ciphers made so far (after keys were destroyed)."""
        self._ciphers.clear()
        self._several.clear()
        self._current.clear()

    def _person_ids(self, guild_id: int, people: set[int]) -> dict[int, bytes]:
        """The current key id of each person in the server, their keys made if new."""
        ids: dict[int, bytes] = {}
        wanted: list[int] = []
        for person in people:
            found = self._current.get((guild_id, person))
            if found is None:
                wanted.append(person)
            else:
                ids[person] = found
        if not wanted:
            return ids
        tag = self.tag(guild_id)
        generation = dict.fromkeys(wanted, 0)
        while wanted:
            candidates = {
                person: key_id(tag, self.hashes.recorded(person), generation[person])
                for person in wanted
            }
            made = self.people.make(candidates.values())
            wanted = []
            for person, candidate in candidates.items():
                if made.get(candidate) is None:  # destroyed: the next generation
                    generation[person] += 1
                    wanted.append(person)
                else:
                    ids[person] = candidate
                    if len(self._current) < _MOST_CACHED:
                        self._current[(guild_id, person)] = candidate
        return ids

    def _cipher(self, block: bytes) -> AESGCM:
        """The cipher of the key ids `block` holds (eva.core.sealing.join_ids).

        One person's cipher is met again and again and kept; the people a line credits
        seldom come together twice (a busy channel's lines would fill memory), so only
        the last `_MOST_SEVERAL` of those are.
        """
        several = len(block) > KEY_ID_BYTES
        cache = self._several if several else self._ciphers
        found = cache.get(block)
        if found is not None:
            return found
        key_ids = split_ids(block)
        keys = self.people.find(key_ids)
        if any(key_id not in keys for key_id in key_ids):
            raise SealedWithoutKeys(
                f"it is sealed with a key the key store {self.store_id} at "
                f"{self.people.folder.parent} does not hold: restore the key store's "
                f"{self.people.folder.name} folder from where you back it up (the master key "
                "alone does not make people's keys again)"
            )
        data_keys = [keys[key_id] for key_id in key_ids]
        if any(data_key is None for data_key in data_keys):
            raise _Destroyed
        cipher = AESGCM(sealing_key([data_key for data_key in data_keys if data_key is not None]))
        if len(cache) >= (_MOST_SEVERAL if several else _MOST_CACHED):
            cache.clear()
        cache[block] = cipher
        return cipher


def _author_of(event: AnyEvent, edited_author: Callable[[int], int]) -> int:
    return edited_author(event.index) if isinstance(event, MessageEdited) else 0

