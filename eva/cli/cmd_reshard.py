# `eva reshard`: move every guild to the data directory of the shard that owns it.
#
# The shell of eva.store.reshard: it checks the directories given, takes each one's
# writer lock (so no bot or other writing command runs on any of them meanwhile),
# and reports per guild.
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from eva.cli.common import Progress, UserError, add_json_option, open_store, print_json
from eva.store.reshard import (
    JOURNAL,
    GuildMove,
    Place,
    ReshardRefused,
    ReshardReport,
    reshard,
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "reshard",
        help="move every guild to the data directory of the shard that owns it",
        description=(
            "For a new shard count M, give the data directories of shards 0 .. M-1 in order "
            "(each created if missing). Discord puts a guild on shard "
            "(guild_id >> 22) % M; every guild held anywhere else, in one of them or in an "
            "old directory given with --from, is moved there: its channels copied as they "
            "are, each copy replayed and its digest compared with the original's, and only "
            "then removed from where it was. Each directory guilds left is then rewritten by "
            "a compacting copy and scanned, so no byte of the moved messages stays in its "
            "files. Stop every bot process of these directories first: it refuses to run "
            "while one holds a directory. Killed at any point, run it again with the same "
            "arguments: it finishes without losing or doubling anything. Exits 1 if a guild "
            "could not move (a conflict, a copy that does not verify) or a scan found words."
        ),
    )
    parser.add_argument(
        "--shard-count", type=int, required=True, metavar="M", help="the new number of shards"
    )
    parser.add_argument(
        "dirs", nargs="+", type=Path, metavar="DIR", help="the data directory of shard 0, 1, ..."
    )
    parser.add_argument(
        "--from",
        dest="old",
        nargs="+",
        type=Path,
        default=[],
        metavar="DIR",
        help="old data directories that are no shard's now: every guild in them moves out",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="only say which guilds would move where"
    )
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    add_json_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    count: int = args.shard_count
    places = _places(args, count)
    moving = Progress("reshard", _to_move(places, count), quiet=args.quiet or args.json)

    def on_guild(guild: GuildMove) -> None:
        moving.advance()
        if not args.json:
            print(_guild_line(guild), flush=True)

    try:
        report = reshard(places, count, dry_run=args.dry_run, on_guild=on_guild)
    except ReshardRefused as refused:
        raise UserError(str(refused)) from None
    moving.close()
    if args.json:
        print_json(
            {
                "ok": report.ok,
                "dry_run": args.dry_run,
                "shard_count": count,
                "dirs": [str(p) for p in args.dirs],
                "from": [str(p) for p in args.old],
                "guilds": report.guilds,
                "in_place": report.in_place,
                "moved": sum(1 for m in report.moves if m.outcome == "moved"),
                "moves": [m.to_json() for m in report.moves],
                "compacted": [c.to_json() for c in report.cleared],
                "seconds": round(report.seconds, 3),
            }
        )
    else:
        _say_report(args, report, places, count)
    return 0 if report.ok else 1


def _places(args: argparse.Namespace, count: int) -> list[Place]:
    """The directories, checked and opened: those there already first, so that one a bot
    holds is refused before any is made (a dry run makes none)."""
    if count < 1:
        raise UserError(f"--shard-count must be at least 1, not {count}")
    if len(args.dirs) != count:
        raise UserError(
            f"--shard-count {count} needs {count} data directories, one per shard in order "
            f"(0 .. {count - 1}); {len(args.dirs)} given"
        )
    given: list[Path] = [*args.dirs, *args.old]
    resolved = [path.resolve() for path in given]
    twice = sorted({str(p) for p in resolved if resolved.count(p) > 1})
    if twice:
        raise UserError(f"a data directory is given twice: {twice[0]}")
    for path in args.old:
        if not (path / "data.mdb").exists():
            raise UserError(f"no Eva data directory at {path} (given with --from)")
    numbered = sorted(enumerate(given), key=lambda item: not (item[1] / "data.mdb").exists())
    opened: dict[int, Place] = {}
    for number, path in numbered:
        if args.dry_run and not (path / "data.mdb").exists():
            continue  # a directory that will be made holds nothing yet
        store = open_store(path, must_exist=False, write=not args.dry_run)
        opened[number] = Place(path, store, number if number < count else None)
    places = [opened[number] for number in sorted(opened)]
    return _with_missing(places, args.dirs) if args.dry_run else places


def _say_report(
    args: argparse.Namespace, report: ReshardReport, places: list[Place], count: int
) -> None:
    for cleared in report.cleared:
        verdict = (
            f"no text of theirs left in its files ({cleared.texts_checked} checked)"
            if cleared.ok
            else f"{cleared.leftover_hits} texts of theirs STILL FOUND in its files; its "
            f"{JOURNAL} stays, run this again"
        )
        print(
            f"{cleared.path}: compacted after {cleared.guilds} guild(s) left "
            f"({cleared.bytes_before:,} -> {cleared.bytes_after:,} bytes); {verdict}"
        )
    moved = [m for m in report.moves if m.outcome in ("moved", "planned")]
    stuck = [m for m in report.moves if m.outcome not in ("moved", "planned")]
    doing = "would move" if args.dry_run else "moved"
    print(
        f"reshard to {count} shard(s): {report.guilds} guild(s), {report.in_place} in place, "
        f"{len(moved)} {doing}"
        + (f", {len(stuck)} NOT moved (see above)" if stuck else "")
        + f" ({report.seconds:.2f} s)"
    )
    emptied = [p for p in args.old if not _holds_streams(places, p)]
    if emptied and not args.dry_run and report.ok:
        print(
            f"holding no guild now: {', '.join(map(str, emptied))} (remove when you like)",
            file=sys.stdout,
        )


def _with_missing(places: list[Place], dirs: list[Path]) -> list[Place]:
    """For a dry run, the shards' places with a stand-in for each missing directory: an
    empty in-memory store at its number, so the plan's indexes stay the shards'."""
    from eva.store.event_store import EventStore
    from eva.store.memory_kv import MemoryBackend

    by_path = {place.path: place for place in places}
    filled = [
        by_path.get(path) or Place(path, EventStore(MemoryBackend()), number)
        for number, path in enumerate(dirs)
    ]
    return filled + [place for place in places if place.number is None]


def _to_move(places: list[Place], count: int) -> int:
    from eva.core.shards import shard_of

    return len(
        {
            (meta.guild_id, at)
            for at, place in enumerate(places)
            for meta in place.store.streams()
            if shard_of(meta.guild_id, count) != at
        }
    )


def _holds_streams(places: list[Place], path: Path) -> bool:
    return any(place.path == path and place.store.streams() for place in places)


def _guild_line(guild: GuildMove) -> str:
    verdict = {
        "moved": "moved, verified, removed from the source",
        "planned": "would move",
    }.get(guild.outcome, f"NOT MOVED ({guild.outcome}): {guild.why}")
    again = (
        f" ({guild.already_copied} channel(s) copied by an earlier run)"
        if guild.already_copied
        else ""
    )
    return (
        f"guild {guild.guild_id}: {guild.channels} channel(s), {guild.messages:,} messages, "
        f"{guild.source} -> {guild.target}: {verdict}{again}"
    )
