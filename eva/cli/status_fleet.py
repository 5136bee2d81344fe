# `eva status DIR...`: several shards' data directories at once, and whether each guild
# sits in the shard that owns it.
#
# Read-only, like `eva status`: each directory is opened to read, so it may run while the
# bots write. The figures are per shard; a guild held anywhere but in its owner's
# directory (for the shard count given) or in more than one is named.
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eva.cli.common import UserError, open_store
from eva.core.settings import MemorySettings
from eva.core.shards import Misplaced, misplaced
from eva.core.timing import pending_tasks
from eva.store.reshard import JOURNAL

DATA_FILE = "data.mdb"


@dataclass(frozen=True, slots=True)
class ShardStatus:
    """One data directory's figures."""

    shard: int
    path: Path
    guilds: int
    channels: int
    messages: int
    disk_bytes: int
    pending_tasks: int
    forgets_pending: int
    compaction_owed: bool  # a reshard moved guilds out and has not compacted it yet

    def to_json(self) -> dict[str, Any]:
        return {
            "shard": self.shard,
            "dir": str(self.path),
            "guilds": self.guilds,
            "channels": self.channels,
            "messages": self.messages,
            "disk_bytes": self.disk_bytes,
            "pending_tasks": self.pending_tasks,
            "forgets_pending": self.forgets_pending,
            "reshard_compaction_owed": self.compaction_owed,
        }


def shard_dirs(given: list[Path]) -> list[Path]:
    """The data directories given, in order; one folder that is no data directory but holds
    some stands for them, ordered by the number their names end with (else by name)."""
    if len(given) == 1 and given[0].is_dir() and not (given[0] / DATA_FILE).exists():
        inside = [path for path in given[0].iterdir() if (path / DATA_FILE).exists()]
        if not inside:
            raise UserError(f"no Eva data directory at {given[0]} nor in any folder in it")
        return sorted(inside, key=_natural)
    for path in given:
        if not (path / DATA_FILE).exists():
            raise UserError(f"no Eva data directory at {path}")
    return given


def _natural(path: Path) -> tuple[str, int, str]:
    found = re.search(r"(\d+)$", path.name)
    if found is None:
        return (path.name, -1, path.name)
    return (path.name[: found.start()], int(found.group(1)), path.name)


def fleet_status(
    dirs: list[Path], settings: MemorySettings
) -> tuple[list[ShardStatus], dict[int, list[int]]]:
    """Each directory's figures, and guild id -> the shard numbers holding streams of it."""
    shards = []
    holders: dict[int, list[int]] = {}
    for number, path in enumerate(dirs):
        metas = open_store(path).streams()
        guilds = {meta.guild_id for meta in metas}
        for guild in guilds:
            holders.setdefault(guild, []).append(number)
        shards.append(
            ShardStatus(
                shard=number,
                path=path,
                guilds=len(guilds),
                channels=len(metas),
                messages=sum(meta.messages for meta in metas),
                disk_bytes=sum(f.stat().st_size for f in path.rglob("*") if f.is_file()),
                pending_tasks=sum(pending_tasks(meta, settings) for meta in metas),
                forgets_pending=sum(len(meta.forgetting) for meta in metas),
                compaction_owed=(path / JOURNAL).exists(),
            )
        )
    return shards, holders


def out_of_place(holders: dict[int, list[int]], shard_count: int | None) -> list[Misplaced]:
    """With a shard count, every guild not held by its owner alone; without one, every
    guild held in more than one directory."""
    if shard_count is not None:
        return misplaced(holders, shard_count)
    return [
        Misplaced(guild, tuple(sorted(at)), -1)
        for guild, at in sorted(holders.items())
        if len(at) > 1
    ]


def fleet_json(
    shards: list[ShardStatus], wrong: list[Misplaced], shard_count: int | None
) -> dict[str, Any]:
    paths = [shard.path for shard in shards]
    return {
        "shards": [shard.to_json() for shard in shards],
        "totals": {
            "shards": len(shards),
            "guilds": sum(s.guilds for s in shards),
            "channels": sum(s.channels for s in shards),
            "messages": sum(s.messages for s in shards),
            "disk_bytes": sum(s.disk_bytes for s in shards),
            "pending_tasks": sum(s.pending_tasks for s in shards),
            "forgets_pending": sum(s.forgets_pending for s in shards),
        },
        "placement": {
            "shard_count": shard_count,
            "ok": not wrong,
            "misplaced": [
                {
                    "guild_id": m.guild_id,
                    "held_in": [str(paths[at]) for at in m.held_in],
                    "owner_shard": None if m.owner < 0 else m.owner,
                    "owner_dir": str(paths[m.owner]) if 0 <= m.owner < len(paths) else None,
                }
                for m in wrong
            ],
        },
    }


def fleet_table(shards: list[ShardStatus]) -> str:
    header = ("shard", "dir", "guilds", "channels", "messages", "disk", "pending", "forgets")
    rows = [
        (
            str(s.shard),
            str(s.path) + (" (reshard compaction owed)" if s.compaction_owed else ""),
            f"{s.guilds:,}",
            f"{s.channels:,}",
            f"{s.messages:,}",
            _bytes(s.disk_bytes),
            f"{s.pending_tasks:,}",
            f"{s.forgets_pending:,}",
        )
        for s in shards
    ]
    rows.append(
        (
            "total",
            f"{len(shards)} shard(s)",
            f"{sum(s.guilds for s in shards):,}",
            f"{sum(s.channels for s in shards):,}",
            f"{sum(s.messages for s in shards):,}",
            _bytes(sum(s.disk_bytes for s in shards)),
            f"{sum(s.pending_tasks for s in shards):,}",
            f"{sum(s.forgets_pending for s in shards):,}",
        )
    )
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    left = {0, 1}
    return "\n".join(
        "  ".join(
            cell.ljust(width) if i in left else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in [header, *rows]
    )


def placement_lines(
    shards: list[ShardStatus], wrong: list[Misplaced], shard_count: int | None
) -> list[str]:
    paths = [shard.path for shard in shards]
    if not wrong:
        if shard_count is None:
            return ["no guild is held in more than one directory"]
        return [f"every guild sits in the shard that owns it for {shard_count} shard(s)"]
    lines = []
    for m in wrong:
        held = ", ".join(f"{paths[at]} (shard {at})" for at in m.held_in)
        owner = (
            ""
            if m.owner < 0
            else f"; it belongs in {_place(paths, m.owner)} (shard {m.owner})"
        )
        lines.append(f"guild {m.guild_id} is held in {held}{owner}")
    fix = (
        f"eva reshard --shard-count {shard_count} "
        + " ".join([*map(str, paths), *(["DIR..."] if len(paths) < shard_count else [])])
        if shard_count is not None
        else "eva reshard --shard-count N DIR..."
    )
    lines.append(f"{len(wrong)} guild(s) out of place; `{fix}` moves them")
    return lines


def check_count(dirs: list[Path], shard_count: int | None) -> None:
    """Refuse a shard count below 1 or below the directories given (shard i's is the i-th;
    fewer than the count is fine: the shards after them have none yet)."""
    if shard_count is None:
        return
    if shard_count < 1:
        raise UserError(f"--shard-count must be at least 1, not {shard_count}")
    if len(dirs) > shard_count:
        raise UserError(
            f"--shard-count {shard_count} has shards 0 .. {shard_count - 1}, but {len(dirs)} "
            f"data directories were found: {', '.join(map(str, dirs))}"
        )


def _place(paths: list[Path], shard: int) -> str:
    return str(paths[shard]) if shard < len(paths) else "a directory not given"


def _bytes(count: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= size:
            return f"{count / size:,.1f} {unit}"
    return f"{count} B"
