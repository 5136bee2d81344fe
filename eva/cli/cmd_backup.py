# `eva backup` and `eva restore`: a hot, compacted copy of a data directory, and putting one
# back without bringing back anyone forgotten since.
#
# The shell of eva.store.backup. A restore checks the backup against its manifest, puts
# it in place of the directory's data file in one step, with a tombstone already in it
# for every person a newer record (the directory restored over, and any --forgets-from)
# says was forgotten after the backup was taken, then finishes those forgets for real
# (erased, compacted, proved) and checks every channel again. Killed before the swap,
# the directory is as it was; after it, the forgets are pending and the next command
# that writes finishes them, as after any forget cut short.
from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from eva.cli.common import (
    UserError,
    add_data_option,
    add_json_option,
    add_settings_option,
    load_settings,
    open_store,
    print_json,
)
from eva.core.keys import StreamId
from eva.store.backup import (
    BackupRefused,
    Digests,
    forget_records,
    forgotten_since,
    read_manifest,
    repair_sealed_away,
    replayed,
    stage,
    take_backup,
)
from eva.store.event_store import EventStore
from eva.store.guild_records import carry_newer_records
from eva.store.key_binding import bound_id
from eva.store.key_store import default_path
from eva.store.lmdb_kv import COMPACT_DIR, LmdbBackend


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    backup = subparsers.add_parser(
        "backup",
        help="a consistent, compacted copy of a data directory, safe while the bot runs",
        description=(
            "Copy the data directory (--data) into the new directory TARGET as one "
            "consistent snapshot, while the bot goes on writing: every live entry is "
            "copied into a fresh data file, so the copy holds no freed page and no byte of "
            "anyone erased before it was taken. Each channel of the copy is then replayed, "
            "and TARGET/backup.json records its event count, newest seal and digest, which "
            "`eva restore` checks. The forget records travel inside the copy."
        ),
    )
    backup.add_argument("target", type=Path, metavar="TARGET", help="a new directory")
    add_data_option(backup)
    add_json_option(backup)
    backup.set_defaults(run=run_backup)

    restore = subparsers.add_parser(
        "restore",
        help="put a backup in place of a data directory, forgetting again whoever was "
        "forgotten since",
        description=(
            "Check BACKUP against its manifest (every channel replayed, digests equal), "
            "then put it in place of the data directory (--data; one that holds data only "
            "with --replace, and what it holds that the backup does not is lost). Whoever "
            "the directory restored over, or any directory given with --forgets-from (the "
            "live data, a newer backup), says asked to be forgotten after the backup was "
            "taken is forgotten again, for real, before this ends; killed after the swap, "
            "the next command that writes finishes it. Every channel is checked again "
            "after. Stop the bot of the directory first."
        ),
    )
    restore.add_argument("backup", type=Path, metavar="BACKUP", help="a directory eva backup made")
    restore.add_argument(
        "--replace",
        action="store_true",
        help="the data directory holds data: put the backup in its place",
    )
    restore.add_argument(
        "--forgets-from",
        nargs="+",
        type=Path,
        default=[],
        metavar="DIR",
        help="data directories or newer backups whose forget records must hold after it",
    )
    add_data_option(restore)
    add_settings_option(restore)
    add_json_option(restore)
    restore.set_defaults(run=run_restore)


def run_backup(args: argparse.Namespace) -> int:
    store = open_store(args.data)
    try:
        made = take_backup(store, args.data, args.target)
    except BackupRefused as refused:
        raise UserError(str(refused)) from None
    if args.json:
        print_json(
            {
                "backup": str(made.path),
                "channels": made.streams,
                "bytes": made.bytes,
                "seconds": round(made.seconds, 3),
            }
        )
    else:
        print(
            f"backed up {args.data} to {made.path}: {made.streams} channel(s), "
            f"{made.bytes:,} bytes, every channel replayed ({made.seconds:.2f} s)"
        )
        keyed = bound_id(store)
        if keyed is not None:
            print(f"it is keyed with key store {keyed} ({default_path()}), which a backup "
                  "does not hold: keep a copy of that apart from the data")
    return 0


def run_restore(args: argparse.Namespace) -> int:
    from eva.cli.cmd_forget import finish_pending
    from eva.cli.forget_guild import finish_owed_erasures
    from eva.memory.forget import ErasureFailed

    started = time.perf_counter()
    settings = load_settings(args.settings)
    sealed_away: set[StreamId] = set()
    manifest, there = _checked_backup(args, sealed_away)
    newer_stores = [open_store(path) for path in args.forgets_from]
    store = open_store(args.data, must_exist=False, write=True)
    if there:
        newer_stores.append(store)
    newer = [forget_records(newer_store) for newer_store in newer_stores]
    people, erased_again = _stage(args, store, newer, newer_stores)
    backend = store.backend
    if not isinstance(backend, LmdbBackend):
        raise UserError(f"{args.data} is no LMDB data directory")
    backend.replace_data(args.data / COMPACT_DIR / "data.mdb")
    try:
        reports = finish_pending(store, args.data, settings)
        finish_owed_erasures(store, args.data)
        repair_sealed_away(store, sealed_away)  # their events sealed with keys gone, erased
    except ErasureFailed as failure:
        raise UserError(f"ERASURE FAILED: {failure}") from None
    except OSError as error:
        raise UserError(
            f"{error.strerror or error}; the backup is in place, and the forgets it owes "
            "are pending: `eva forget --resume` (or any command that writes) finishes them "
            "once there is room, and until then no command shows those people's words"
        ) from None
    after, broken = replayed(store)
    forgot = {s for streams in people.values() for s in streams}
    erased = {s for s in manifest if s.guild_id in erased_again and s not in after}
    differ = [
        s for s, d in manifest.items() if s not in forgot | erased and after.get(s) != d
    ]
    restored = _Restored(
        ok=not broken and not differ and set(after) == set(manifest) - erased,
        channels=len(after),
        people=len(people),
        forgot=len(forgot),
        erased=len(erased),
        erased_again=sorted(erased_again),
        messages_erased=sum(r.messages_erased for r in reports),
        differing=[str(s) for s in differ] + broken,
        seconds=time.perf_counter() - started,
    )
    _say_restored(args, restored, newer)
    return 0 if restored.ok else 1


def _checked_backup(
    args: argparse.Namespace, sealed_away: set[StreamId]
) -> tuple[Digests, bool]:
    """The backup's manifest, once the backup replays to it (a channel some of whose events
    are sealed with keys destroyed since, by its log's seals: put in `sealed_away`); and
    whether the directory it goes to holds data (refused without --replace)."""
    try:
        manifest = read_manifest(args.backup)
    except BackupRefused as refused:
        raise UserError(str(refused)) from None
    as_taken, broken = replayed(open_store(args.backup), sealed_away)
    if broken or as_taken != manifest:
        why = broken[0] if broken else "its channels differ from its manifest"
        raise UserError(f"the backup {args.backup} does not verify: {why}; nothing was changed")
    there = (args.data / "data.mdb").exists()
    if there and not args.replace and not open_store(args.data).streams():
        there = False  # a store holding no channel (a restore cut short made it): no loss
    if there and not args.replace:
        raise UserError(
            f"{args.data} holds data; give --replace to put the backup in its place (what it "
            "holds that the backup does not is lost), or restore into a new directory"
        )
    return manifest, there


def _stage(
    args: argparse.Namespace,
    store: EventStore,
    newer: list[dict[StreamId, dict[str, int]]],
    newer_stores: list[EventStore],
) -> tuple[dict[str, list[StreamId]], set[int]]:
    """The backup copied beside the data directory, owing what the newer directories say
    was done since: forgets (tombstones), erasures, switches and keep-outs. Returns who is
    forgotten again where, and the servers erased again."""
    from eva.memory.forget import append_tombstones

    staging = args.data / COMPACT_DIR
    stage(args.backup, staging)
    staged = EventStore(LmdbBackend(staging))
    try:
        theirs, ours = bound_id(staged), bound_id(store)
        if theirs is not None and ours is not None and theirs != ours:
            raise UserError(
                f"the backup is keyed with key store {theirs}, and {args.data} with {ours}: "
                f"restore it with EVA_KEYS naming {theirs}, into a new directory"
            )
        staged.hashes, staged.sealer = store.hashes, store.sealer  # the same key store
        held = {StreamId(m.guild_id, m.channel_id) for m in staged.streams()}
        people = forgotten_since(forget_records(staged), newer)
        now_ms = int(time.time() * 1000)
        erased_again = {
            guild
            for newer_store in newer_stores
            for guild in carry_newer_records(newer_store.backend, staged.backend, now_ms)
        }
        for person, streams in people.items():
            mine = [s for s in streams if s in held]
            append_tombstones(staged, person, mine, "moderator", now_ms)
    finally:
        staged.backend.close()
    return people, erased_again


@dataclass(frozen=True, slots=True)
class _Restored:
    """What a restore did, counts only."""

    ok: bool
    channels: int
    people: int
    forgot: int
    erased: int
    erased_again: list[int]
    messages_erased: int
    differing: list[str]
    seconds: float


def _say_restored(
    args: argparse.Namespace, done: _Restored, newer: list[dict[StreamId, dict[str, int]]]
) -> None:
    if args.json:
        print_json({
            "ok": done.ok,
            "data": str(args.data),
            "backup": str(args.backup),
            "channels": done.channels,
            "forgotten_again": done.people,
            "channels_forgotten_in": done.forgot,
            "servers_erased_again": done.erased_again,
            "messages_erased": done.messages_erased,
            "differing": done.differing,
            "seconds": round(done.seconds, 3),
        })
        return
    print(
        f"restored {args.backup} to {args.data}: {done.channels} channel(s), "
        + (
            "every one replays to its backed-up digest"
            if done.ok
            else f"{len(done.differing)} DO NOT verify: " + ", ".join(done.differing[:5])
        )
        + f" ({done.seconds:.2f} s)"
    )
    if done.people:
        print(
            f"forgot again {done.people} person(s) forgotten after the backup was taken, in "
            f"{done.forgot} channel(s): {done.messages_erased} messages erased, no text of "
            "theirs left in the files"
        )
    if done.erased_again:
        print(
            f"erased again {len(done.erased_again)} server(s) erased (or owed an erasure) "
            f"after the backup was taken: {done.erased} channel(s) gone, proven as a forget is"
        )
    if not newer:
        print(
            "no newer forget records were read (a new directory, no --forgets-from): if "
            "anyone was forgotten after this backup was taken, restore again with "
            "--forgets-from naming the live data or a newer backup",
            file=sys.stderr,
        )
