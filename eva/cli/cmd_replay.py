# `eva replay`: rebuild every projection from the log and compare it with the live one.
from __future__ import annotations

import argparse
import time

from eva.cli.common import (
    Progress,
    add_data_option,
    add_json_option,
    find_stream,
    open_store,
    print_json,
)
from eva.core.keys import StreamId
from eva.store.replay import replay_stream


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="rebuild projections from the event log and check them byte for byte",
        description=(
            "Rebuild every projection of a data directory (or one channel) from its event "
            "streams alone, compare the result with the live projections byte for byte, "
            "and print a digest per channel. Exits 1 if any channel differs."
        ),
    )
    parser.add_argument("channel", nargs="?", help="only this channel (GUILD/CHANNEL, id or name)")
    add_data_option(parser)
    add_json_option(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
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
                    }
                    for r in results
                ],
            }
        )
    else:
        for r in results:
            name = metas[r.stream].channel_name
            verdict = "ok" if r.ok else "DIFFERS in " + ", ".join(r.differing)
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
