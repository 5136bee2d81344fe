# Where a channel's posts go: each post's index, and which of them are repeats.
#
# Pure: the indexes found stored (or handed to the writer already) and the
# channel's message count are arguments; reading the store and the writer's
# state is the shell's (eva.live.posting).
# Invariants: new posts take the next free indexes in the order given, with no
# gap; a post found stored keeps its index; a message id met again in one batch
# is placed once, the later ones are repeats (None).
from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple


class Place(NamedTuple):
    """Where a post is, or goes when stored next: its channel index."""

    at: int
    stored: bool


def next_free_index(messages: int, stored: Iterable[int | None], in_flight_end: int) -> int:
    """The index the next new post takes: after the channel's `messages`, after every
    post found stored (at its index in `stored`; None: not stored) and after the posts in
    flight (the last of which ends at `in_flight_end`)."""
    return max(
        [messages] + [index + 1 for index in stored if index is not None] + [in_flight_end]
    )


def place_posts(
    message_ids: Sequence[int], stored: Sequence[int | None], next_index: int
) -> list[Place | None]:
    """Where each post is (found at its index in `stored`) or goes (from `next_index` on,
    in order); None for the repeat of a message id earlier in the batch."""
    seen: set[int] = set()
    places: list[Place | None] = []
    for message_id, stored_at in zip(message_ids, stored, strict=True):
        if message_id in seen:
            places.append(None)
        elif stored_at is not None:
            places.append(Place(stored_at, stored=True))
        else:
            places.append(Place(next_index, stored=False))
            next_index += 1
        seen.add(message_id)
    return places
