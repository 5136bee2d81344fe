# Which shard owns a guild, and where a fleet's guilds must go for a shard count.
#
# Pure: guild ids and the places (shard numbers) that hold them in, moves and
# misplaced guilds out; it knows no directories, files or stores. Discord puts a
# guild on shard `(guild_id >> 22) % shard_count` (Discord's Gateway documentation,
# "Sharding": `shard_id = (guild_id >> 22) % num_shards`; checked 2026-12-07); each shard
# keeps its guilds in a data directory of its own, so a guild belongs in exactly one place.
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass


def shard_of(guild_id: int, shard_count: int) -> int:
    """The shard Discord puts a guild on, for `shard_count` shards."""
    if shard_count < 1:
        raise ValueError(f"a shard count is at least 1, not {shard_count}")
    return (int(guild_id) >> 22) % shard_count


@dataclass(frozen=True, slots=True)
class Misplaced:
    """A guild held where it does not belong, for one shard count."""

    guild_id: int
    held_in: tuple[int, ...]  # the places that hold streams of it, ascending
    owner: int  # the shard that owns it

    @property
    def duplicated(self) -> bool:
        """Held in more than one place (its owner may be one of them)."""
        return len(self.held_in) > 1


def misplaced(holders: Mapping[int, Iterable[int]], shard_count: int) -> list[Misplaced]:
    """The guilds of `holders` (guild id -> the places holding streams of it) held anywhere
    but in the one place that owns them, by guild id."""
    found = []
    for guild, places in sorted(holders.items()):
        held = tuple(sorted(set(places)))
        owner = shard_of(guild, shard_count)
        if held != (owner,):
            found.append(Misplaced(guild, held, owner))
    return found


@dataclass(frozen=True, slots=True)
class Move:
    """One guild's streams in one place that belong in another."""

    guild_id: int
    source: int
    target: int


def moves(holders: Mapping[int, Iterable[int]], shard_count: int) -> list[Move]:
    """What resharding to `shard_count` moves: every place holding a guild that is not its
    owner gives it to the owner; by source place, then guild id."""
    planned = [
        Move(guild, source, shard_of(guild, shard_count))
        for guild, places in holders.items()
        for source in set(places)
        if source != shard_of(guild, shard_count)
    ]
    return sorted(planned, key=lambda move: (move.source, move.guild_id))
