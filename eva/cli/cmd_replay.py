# `eva replay`: rebuild every projection from the log and compare it with the live one;
# with --repair, write the rebuild over the projections that differ.
from __future__ import annotations

import argparse
import time

from eva.cli.common import (
    Progress,
    UserError,
    add_channel_argument,
    add_data_option,
    add_json_option,
    find_stream,
    open_store,
    print_json,
)
from eva.core.keys import StreamId
from eva.store.event_store import EventStore
from eva.store.replay import LogMovedError, ReplayResult, repair_stream, replay_stream


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="rebuild projections from the event log and check them byte for byte",
        description=(
            "Rebuild every projection of a data directory (or one channel) from its event "
            "streams alone, compare the result with the live projections byte for byte, "
            "and print a digest per channel. On the way it checks the log's seals: every "
            "event is chained to the one before by a hash, so an event altered, damaged, "
            "dropped or put in after the fact is named by its position. Exits 1 if any "
            "channel differs or its log is broken. With --repair, each channel that differs "
            "gets the rebuilt projections written over its live ones (run it while Eva is "
            "stopped), and is checked again; a broken log is never repaired, only reported."
        ),
    )
    add_channel_argument(parser, optional=True)
    add_data_option(parser)
    add_json_option(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--repair",
        action="store_true",
        help="write the rebuilt projections over the live ones that differ (Eva stopped)",
    )
    parser.add_argument(
        "--skip-seals", action="store_true", help="do not check the log's seals (projections only)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    store = open_store(args.data, write=args.repair)
    if args.channel:
        streams = [find_stream(store, args.channel)]
    else:
        streams = [StreamId(m.guild_id, m.channel_id) for m in store.streams()]
    metas = {StreamId(m.guild_id, m.channel_id): m for m in store.streams()}
    total = sum(metas[s].position for s in streams)
    progress = Progress("replay", total, quiet=args.quiet or args.json)
    started = time.perf_counter()
    results = [
        replay_stream(store, stream, progress.advance, check_seals=not args.skip_seals)
        for stream in streams
    ]
    progress.close()
    repaired: dict[StreamId, tuple[str, ...]] = {}
    if args.repair:
        results = [_repaired(store, r, repaired) if _repairable(r) else r for r in results]
    elapsed = time.perf_counter() - started
    bad = [r for r in results if not r.ok]
    if args.json:
        print_json(
            {
                "ok": not bad,
                "seconds": round(elapsed, 3),
                "channels": [
                    {
                        "channel": str(r.stream),
                        "name": metas[r.stream].channel_name,
                        "events": r.events,
                        "digest": r.rebuilt_digest,
                        "live_digest": r.live_digest,
                        "ok": r.ok,
                        "differing_tables": list(r.differing),
                        "repaired_tables": list(repaired.get(r.stream, ())),
                        "log": _log_json(r),
                    }
                    for r in results
                ],
            }
        )
    else:
        for r in results:
            name = metas[r.stream].channel_name
            print(
                f"{r.stream} #{name} events={r.events} digest={r.rebuilt_digest[:16]} "
                f"{_verdict(r, repaired)}"
            )
        events = sum(r.events for r in results)
        broken = [r for r in bad if _log_broken(r)]
        if broken:
            print(
                f"replay: the log of {len(broken)} of {len(results)} channels is damaged or "
                "was altered; --repair rebuilds projections only, never a log: restore the "
                "data directory from a backup, or import the channel's export into a new one"
            )
        if len(bad) > len(broken):
            print(
                f"replay: {len(bad) - len(broken)} of {len(results)} channels differ from "
                "the live state"
            )
        if not bad:
            print(
                f"replay: all {len(results)} channels match the live state "
                f"({events} events in {elapsed:.2f} s)"
            )
    return 1 if bad else 0


def _log_broken(result: ReplayResult) -> bool:
    return bool(result.damaged) or (result.log is not None and not result.log.ok)


def _repairable(result: ReplayResult) -> bool:
    """Projections that differ from a sound log; a broken log is never rebuilt from."""
    return not result.ok and not _log_broken(result)


def _verdict(result: ReplayResult, repaired: dict[StreamId, tuple[str, ...]]) -> str:
    if result.damaged:
        return f"LOG DAMAGED: {result.damaged}"
    log = result.log
    if log is not None and log.broken is not None:
        return f"LOG BROKEN at event {log.broken.position}: {log.broken.why}"
    verdict = "ok" if result.ok else "DIFFERS in " + ", ".join(result.differing)
    if result.stream in repaired:
        verdict = "repaired " + ", ".join(repaired[result.stream]) + f", now {verdict}"
    if log is not None and result.ok:
        verdict += f", log sealed (head {log.head[:16]})"
    return verdict


def _log_json(result: ReplayResult) -> dict[str, object] | None:
    log = result.log
    if log is None:
        return None
    return {
        "ok": log.ok and not result.damaged,
        "events": log.events,
        "head": log.head,
        "broken_at": None if log.broken is None else log.broken.position,
        "why": result.damaged or (None if log.broken is None else log.broken.why),
    }


def _repaired(
    store: EventStore, result: ReplayResult, repaired: dict[StreamId, tuple[str, ...]]
) -> ReplayResult:
    """Repair a channel that differs and check it again; note which tables were written."""
    try:
        repaired[result.stream] = repair_stream(store, result.stream).rewritten
    except LogMovedError as error:
        raise UserError(f"cannot repair: {error}; stop Eva and run it again") from None
    return replay_stream(store, result.stream)
