# `eva forget` and `eva verify-erased`: erase a person for real, and check files for texts.
#
# Run `eva forget` while no bot process has the data directory open (the bot
# has /forget-me for that): the compacting copy replaces the data file.
from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import msgspec
import trio

from eva.cli.common import (
    FIND_USER_ID,
    UserError,
    add_data_option,
    add_json_option,
    add_settings_option,
    load_settings,
    open_store,
    print_json,
    resolve_user,
    user_id_or_name,
)
from eva.cli.forget_guild import finish_owed_erasures, run_forget_guild
from eva.core.events import AnyEvent, ForgetBy
from eva.core.forget import PROOF_MIN_BYTES, proof_texts
from eva.core.keys import StreamId
from eva.core.settings import MemorySettings
from eva.core.summarize import OfflineSummarizer
from eva.memory.forget import (
    ErasureFailed,
    ForgetReport,
    forget,
    pending_forgets,
    request_everywhere,
)
from eva.store.erasure import (
    log_texts,
    prove_erased,
    purge_ready,
    scan_files,
    scan_proof,
    surviving_texts,
    unpurged,
)
from eva.store.event_store import Appended, EventStore


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "forget",
        help="erase a person's messages and every line made from them, for real",
        description=(
            "Append a tombstone, erase the person's messages (indexes stay), make every "
            "line above them again, rewrite the log without their words, compact the data "
            "file, and scan every file for their texts: the forget fails loudly unless "
            "none is found. Finishes forgets a crash left pending first. Run it while no "
            "bot process uses the data directory."
        ),
    )
    parser.add_argument(
        "--user", type=user_id_or_name,
        help="the person's Discord user id, or a name their stored messages carry",
    )
    parser.add_argument(
        "--guild", type=int,
        help="only this guild (default: every guild); with no --user, the whole server: "
        "every channel of it erased and the files scanned, as a forget proves itself",
    )
    parser.add_argument("--yes", action="store_true",
                        help="erase a whole server (--guild, no --user) without being asked")
    parser.add_argument(
        "--by", choices=["operator", "self", "moderator"], default="operator",
        help="who asked, for the audit: whoever runs Eva (the default), the person, or a "
        "moderator of the server"
    )
    parser.add_argument(
        "--eva-id",
        type=_user_id,
        default=os.environ.get("EVA_USER_ID") or "0",  # parsed by argparse, as if given
        help="Eva's own user id (default $EVA_USER_ID); Eva cannot forget herself",
    )
    parser.add_argument("--resume", action="store_true", help="only finish pending forgets")
    add_data_option(parser)
    add_settings_option(parser)
    add_json_option(parser)
    parser.set_defaults(
        run=run_forget,
        interrupted="a forget recorded before this stays pending, its words out of sight; "
        "eva forget --resume (or any command that writes) finishes it",
    )

    verify = subparsers.add_parser(
        "verify-erased",
        help="scan every file of a data directory for texts that must be gone",
        description=(
            "Read TEXTS (one text per line, UTF-8), such as a forgotten person's own "
            "messages, and look for them in every byte of every file under the data "
            "directory and in its log read with the keys, by the rule a forget proves "
            "itself with: texts too short to tell anyone apart, and texts someone else "
            "also wrote (a message still kept holds them), are left out and counted. "
            "Exits 1 if any text checked is found."
        ),
    )
    verify.add_argument("--texts", type=Path, required=True, help="file with one text per line")
    verify.add_argument("--every-text", action="store_true",
                        help="look for every text given, short and shared ones too")
    add_data_option(verify)
    add_json_option(verify)
    verify.set_defaults(run=run_verify)


def _user_id(text: str) -> int:
    """Eva's user id as --eva-id or EVA_USER_ID gives it (0: not given)."""
    try:
        number = int(text)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(
            f"{text!r} is no Discord user id (it comes from --eva-id or EVA_USER_ID)"
        )
    return number


def run_forget(args: argparse.Namespace) -> int:
    if args.user is None and args.guild is None and not args.resume:
        raise UserError(
            "say whom to forget with --user ID or --user NAME, or which whole server with "
            f"--guild G (or --resume to finish pending ones); {FIND_USER_ID}"
        )
    settings = load_settings(args.settings)
    store = open_store(args.data, write=True)
    if args.user is None and args.guild is not None and not args.resume:
        finish_pending(store, args.data, settings)
        return run_forget_guild(args, store)
    user = None if args.user is None else resolve_user(store, args.user, args.guild)
    if user is not None and args.eva_id and user == args.eva_id:
        raise UserError(
            "that is Eva's own id: Eva cannot forget herself. Her replies are part of each "
            "channel's memory; a moderator can delete single messages of hers in Discord."
        )
    asked = None if user is None else store.hashes.recorded(user)
    streams: list[StreamId] = []
    if asked is not None:
        streams = [
            StreamId(m.guild_id, m.channel_id)
            for m in store.streams()
            if args.guild is None or m.guild_id == args.guild
        ]
        if args.guild is not None and not streams:
            raise UserError(f"no channel of guild {args.guild} in this data directory")
        # The promise first, before any other work: a tombstone in every channel that
        # holds their words, durable once this returns; the erasure then finishes by itself.
        recorded = request_everywhere(store, asked, streams, args.by, int(time.time() * 1000))
        if recorded:
            print(
                f"forget recorded in {recorded} channel(s); erasing now (if this is cut "
                "short, the next command that writes to the data directory finishes it)",
                file=sys.stderr if args.json else sys.stdout,
                flush=True,
            )
    try:
        # older pending forgets first; the one asked for below, with the channels asked for
        reports = finish_pending(store, args.data, settings, but=asked)
        finish_left_purges(store, args.data)
        finish_owed_erasures(store, args.data)
        if asked is not None:
            reports.append(_run(store, args.data, asked, streams, args.by, settings))
    except ErasureFailed as failure:
        raise UserError(f"ERASURE FAILED: {failure}") from None
    if args.json:
        print_json({"forgets": [msgspec.to_builtins(r) for r in reports]})
        return 0
    if not reports:
        print("no forget was pending")
    for report in reports:
        print(_describe(report, user))
    return 0


def finish_left_forgets(store: EventStore, data: Path, settings: MemorySettings) -> int:
    """Finish every forget a crash left pending, before a command writes anything else;
    says so on standard error. Returns how many people's forgets it finished."""
    pending = pending_forgets(store)
    if not pending:
        return 0
    channels = sum(len(streams) for streams in pending.values())
    print(
        f"eva: finishing {len(pending)} forget(s) left pending in {channels} channel(s) first",
        file=sys.stderr,
        flush=True,
    )
    try:
        finish_pending(store, data, settings)
    except ErasureFailed as failure:
        raise UserError(f"ERASURE FAILED: {failure}") from None
    return len(pending)


def finish_left_purges(store: EventStore, data: Path) -> int:
    """Take out of the log the texts deleted or edited away that a stop left there (the
    bot purges them a while after they go), then compact the file and look for them, before
    a command writes anything else; says so on standard error. A channel whose lines are
    still to be made again waits for `eva build` or the bot. Returns the channels purged."""
    ready = [meta for meta in unpurged(store) if not meta.stale]
    if not ready:
        return 0
    print(
        f"eva: taking texts deleted or edited away out of {len(ready)} channel(s) first",
        file=sys.stderr,
        flush=True,
    )
    done = purge_ready(store)
    scan = prove_erased(store, data, done.texts)
    if scan.hits:
        raise UserError(
            f"ERASURE FAILED: {scan.texts_found} texts deleted or edited away are still in "
            + ", ".join(scan.files_found)
        )
    return done.purged


def finish_pending(
    store: EventStore, data: Path, settings: MemorySettings, but: str | None = None
) -> list[ForgetReport]:
    """Finish the pending forget of every person but `but`; raises ErasureFailed if a
    person's words are still found afterwards."""
    return [
        _run(store, data, person, streams, "self", settings)
        for person, streams in pending_forgets(store).items()
        if person != but
    ]


def _run(
    store: EventStore,
    data: Path,
    person: str,
    streams: list[StreamId],
    by: ForgetBy,
    settings: MemorySettings,
) -> ForgetReport:
    async def append(stream: StreamId, events: Sequence[AnyEvent]) -> Appended:
        return store.append(stream, events)

    async def main() -> ForgetReport:
        return await forget(
            store,
            data,
            person,
            streams,
            by,
            OfflineSummarizer(settings.line_limit),
            append,
            settings,
            int(time.time() * 1000),
        )

    return trio.run(main)


def _describe(report: ForgetReport, user: int | None) -> str:
    if not report.channels:
        who = f"user {user}" if user is not None else f"person {report.person_hash}"
        return f"{who}: no messages stored in the selected channels; nothing to forget"
    seconds = report.erase_s + report.purge_s + report.compact_s + report.scan_s
    return (
        f"forgot person {report.person_hash} in {len(report.channels)} channels: "
        f"{report.messages_erased} messages erased, {report.lines_remade} lines made again, "
        f"{report.events_rewritten} stored events rewritten; data file "
        f"{report.data_bytes_before:,} -> {report.data_bytes_after:,} bytes; "
        f"{report.texts_checked} texts checked in every file: {report.leftover_hits} found "
        f"({seconds:.1f} s)"
        + (
            "; words erased from the log before an earlier run was cut short could not be "
            "looked for again (the data file was compacted again)"
            if report.unchecked
            else ""
        )
    )


def run_verify(args: argparse.Namespace) -> int:
    try:
        texts = [line for line in args.texts.read_text(encoding="utf-8").splitlines() if line]
    except FileNotFoundError:
        raise UserError(f"no file at {args.texts}") from None
    except UnicodeDecodeError as error:
        raise UserError(f"{args.texts} is not UTF-8 text: {error}") from None
    if not args.data.is_dir():
        raise UserError(f"no data directory at {args.data}")
    short = shared = 0
    store = open_store(args.data)
    if args.every_text:
        report = scan_files(args.data, texts, log_texts(store))
    else:
        given = list(dict.fromkeys(text.strip() for text in texts if text.strip()))
        checked = proof_texts(given, surviving_texts(store))
        short = sum(len(text.encode()) < PROOF_MIN_BYTES for text in given)
        shared = len(given) - short - len(checked)
        report = scan_proof(store, args.data, checked)
    if args.json:
        print_json({**msgspec.to_builtins(report), "left_out_short": short,
                    "left_out_shared": shared})
    else:
        left_out = (
            f"{short + shared:,} left out ({short:,} under {PROOF_MIN_BYTES} bytes, too short "
            f"to tell anyone apart; {shared:,} that someone else also wrote); "
            if short + shared else ""
        )
        verdict = "none found" if not report.hits else f"FOUND {report.hits} times"
        print(
            f"{left_out}{report.texts:,} texts checked in {report.files} files "
            f"({report.bytes:,} bytes): {verdict}"
            + (f" ({report.texts_found} distinct texts)" if report.hits else "")
        )
    return 1 if report.hits else 0
