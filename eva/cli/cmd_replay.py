# `eva replay`: rebuild every projection from the log and compare it with the live one;
# with --repair, write the rebuild over the projections that differ.
from __future__ import annotations

import argparse
import time

from eva.cli.common import (
    Progress,
    UserError,
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
            "and print a digest per channel. Exits 1 if any channel differs. With --repair, "
            "each channel that differs gets the rebuilt projections written over its live "
            "ones (run it while Eva is stopped), and is checked again."
        ),
    )
    parser.add_argument("channel", nargs="?", help="only this channel (GUILD/CHANNEL, id or name)")
    add_data_option(parser)
    add_json_option(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.add_argument(
        "--repair",
        action="store_true",
        help="write the rebuilt projections over the live ones that differ (Eva stopped)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    store = open_store(args.data)
    if args.channel:
        streams = [find_stream(store, args.channel)]
    else:
        streams = [StreamId(m.guild_id, m.channel_id) for m in store.streams()]
    metas = {StreamId(m.guild_id, m.channel_id): m for m in store.streams()}
    total = sum(metas[s].position for s in streams)
    progress = Progress("replay", total, quiet=args.quiet or args.json)
    started = time.perf_counter()
    results = [replay_stream(store, stream, progress.advance) for stream in streams]
    progress.close()
    repaired: dict[StreamId, tuple[str, ...]] = {}
    if args.repair:
        results = [_repaired(store, r, repaired) if not r.ok else r for r in results]
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
                    }
                    for r in results
                ],
            }
        )
    else:
        for r in results:
            name = metas[r.stream].channel_name
            verdict = "ok" if r.ok else "DIFFERS in " + ", ".join(r.differing)
            if r.stream in repaired:
                verdict = "repaired " + ", ".join(repaired[r.stream]) + f", now {verdict}"
            print(f"{r.stream} #{name} events={r.events} digest={r.rebuilt_digest[:16]} {verdict}")
        events = sum(r.events for r in results)
        if bad:
            print(f"replay: {len(bad)} of {len(results)} channels differ from the live state")
        else:
            print(
                f"replay: all {len(results)} channels match the live state "
                f"({events} events in {elapsed:.2f} s)"
            )
    return 1 if bad else 0


def _repaired(
    store: EventStore, result: ReplayResult, repaired: dict[StreamId, tuple[str, ...]]
) -> ReplayResult:
    """Repair a channel that differs and check it again; note which tables were written."""
    try:
        repaired[result.stream] = repair_stream(store, result.stream).rewritten
    except LogMovedError as error:
        raise UserError(f"cannot repair: {error}; stop Eva and run it again") from None
    return replay_stream(store, result.stream)
