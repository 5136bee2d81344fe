# `eva plan`: the monthly bill of one server, from a channel's real timing.
#
# Shell around eva.plan.server_month. It reads a channel (an export, or a channel of a
# data directory, which it only reads), puts Eva's replies among its messages,
# posts each answer into the chat after its question, plays the whole through
# the memory with the offline summarizer in a temporary directory (nothing is
# sent anywhere), and prices every reply request through the model of the
# prompt cache, for each reply model and cache layout. The figures depend on
# the assumptions printed with them (tool rounds, tool results, answer size).
# The channel is played again for each smaller row asked for (`--rows`), to
# show what a coarser row saves and what it costs in zooms.
# Invariants: the same input, settings and seed give the same figures; a model
# missing from the price table is shown unpriced, never guessed.
from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import msgspec
import trio

from eva.cli.cmd_cost import load_model_settings
from eva.cli.cmd_import import read_export
from eva.cli.common import (
    UserError,
    add_json_option,
    add_settings_option,
    find_stream,
    load_settings,
    open_store,
    print_json,
)
from eva.cli.plan_output import MODELS, describe_plan, kib, plan_json, rows_json, say
from eva.core.dce import ExportError, export_events, parse_export
from eva.core.events import AnyEvent, ChannelDescribed, MessagePosted
from eva.core.keys import StreamId
from eva.core.prices import BYTES_PER_TOKEN
from eva.core.prompt import CACHE_LAYOUTS, estimate_tokens
from eva.core.settings import MemorySettings, ModelSettings
from eva.core.summarize import OfflineSummarizer
from eva.memory.build import Memory
from eva.memory.view import channel_zone
from eva.model.line_prompt import LINE_INSTRUCTIONS
from eva.model.prompts import SYSTEM_PROMPT, new_message_text
from eva.model.reply import EMPTY_TAIL_TEXT, TOOL_USE_SYSTEM_TOKENS, TOOLS_TEXT
from eva.plan.chart import daily_usd_svg
from eva.plan.month_summary import RowFigures, row_figures, summarize, usd_by_day
from eva.plan.server_month import (
    PLAN_REPLIES,
    PLAN_USD,
    PromptTexts,
    ReplyAssumptions,
    Timeline,
    Variant,
    at_rate,
    bill_variant,
    place_replies,
    read_timeline,
)
from eva.plan.tree_cost import TreeBill, bill_tree
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend

MENTION = re.compile(r"\beva\b", re.IGNORECASE)
"""A message talks to Eva when it holds "eva" as a word, in any case ("@Eva" included): an
export of a channel Eva was never in holds no mention of her id."""
EVA_NAME = "Eva"
EVA_AUTHOR_ID = 0
EVA_MESSAGE_IDS = 1 << 62
"""Eva's answers get message ids from here on, far from any real one."""
ANSWER_SECONDS = 3.0
"""From the last request of a reply to its answer in the chat."""
ANSWER_TEXT = (
    "I remember that: it came up a while ago, and here is what people said about it then. "
)
ROW_SHARES = "1,0.5,0.25"
"""The row sizes `eva plan` compares by default: shares of the row's marks."""


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    plan = subparsers.add_parser(
        "plan",
        help="what one server costs a month, from a channel's real timing",
        description=(
            "Put Eva's replies where people talk in a real channel (by default the plan's "
            f"{PLAN_REPLIES:,} a month, spread over the messages in proportion to activity), "
            "play the channel through the memory offline in a temporary directory, and price "
            "every reply request through a model of the provider's prompt cache and the "
            "tree's lines, for each reply model and cache layout. Prints $/month, $/reply "
            f"(median, 95th percentile, cold and warm) and the margin on the ${PLAN_USD:.0f} "
            "plan. Nothing is sent anywhere."
        ),
    )
    plan.add_argument("export", nargs="?", type=Path, metavar="EXPORT",
                      help="a DiscordChatExporter JSON export (.json or .json.gz)")
    plan.add_argument("--data", type=Path, default=None,
                      help="read the channel from this data directory instead (read only)")
    plan.add_argument("--channel", default=None,
                      help="with --data: the channel (GUILD/CHANNEL, id or name)")
    plan.add_argument("--replies-per-month", type=int, default=PLAN_REPLIES, metavar="N",
                      help=f"replies a month to place (default {PLAN_REPLIES:,}, the plan's)")
    plan.add_argument("--mentions-only", action="store_true",
                      help="answer only the messages that name Eva (at most N a month)")
    plan.add_argument("--seed", type=int, default=1, help="where the replies fall (default 1)")
    assumed = ReplyAssumptions()
    plan.add_argument("--tool-rounds", type=int, default=assumed.tool_rounds,
                      metavar="R", help="tool rounds per reply, each re-reading the prompt "
                      f"(default {assumed.tool_rounds})")
    plan.add_argument("--tool-result-bytes", type=int,
                      default=assumed.tool_result_bytes, metavar="B",
                      help=f"what a tool returns (default {assumed.tool_result_bytes})")
    plan.add_argument("--answer-bytes", type=int, default=assumed.answer_bytes,
                      metavar="B", help="Eva's answer, also posted into the chat "
                      f"(default {assumed.answer_bytes})")
    plan.add_argument("--check-share", type=float, default=assumed.check_share, metavar="S",
                      help="share of replies that get the round checking details Eva did "
                      f"not read, two more requests (default {assumed.check_share})")
    plan.add_argument("--recall-finds", type=float, default=assumed.recall_finds, metavar="S",
                      help="with recall first: the share of replies whose one recall shows "
                      f"the message they are about (default {assumed.recall_finds}, "
                      "scripts/eval_recall.py)")
    plan.add_argument("--thinking-tokens", type=int, default=assumed.thinking_tokens,
                      metavar="T", help="output spent thinking in each request "
                      f"(default {assumed.thinking_tokens})")
    plan.add_argument("--messages-per-month", type=float, default=None, metavar="N",
                      help="run the channel's clock faster or slower so that people post N "
                      "messages a month (gaps scaled alike, bursts kept)")
    plan.add_argument("--rows", default=ROW_SHARES, metavar="SHARES",
                      help="row sizes to compare, as shares of the row's marks (row_low_bytes "
                      "and row_high_bytes), each played again and priced with the default "
                      "model and layout: one tool round a reply, zooming down to the message "
                      f"it is about, and recall first (default {ROW_SHARES}; 1: the settings' "
                      "row only, played once)")
    plan.add_argument("--chart", type=Path, default=None, metavar="FILE.svg",
                      help="draw dollars a day of the default settings as an SVG chart")
    add_settings_option(plan)
    add_json_option(plan)
    plan.set_defaults(run=run_plan)


# -- reading the channel -------------------------------------------------------------


def channel_posts(args: argparse.Namespace) -> tuple[StreamId, str, list[AnyEvent]]:
    """The channel's stream, name and events (its description and its messages)."""
    if (args.export is None) == (args.data is None):
        raise UserError("give an EXPORT file or --data DIR, one of them")
    if args.export is not None:
        raw = read_export(args.export)
        try:
            export = parse_export(raw)
        except ExportError as error:
            raise UserError(f"cannot read {args.export}: {error}") from None
        events = export_events(export, None, lambda _: None)
        return export.stream, export.channel.name, events
    store = open_store(args.data)
    try:
        streams = store.streams()
        if args.channel is not None:
            stream = find_stream(store, args.channel)
        elif len(streams) == 1:
            stream = StreamId(streams[0].guild_id, streams[0].channel_id)
        else:
            raise UserError(f"{args.data} holds {len(streams)} channels: name one with --channel")
        meta = store.meta(stream)
        stored: list[AnyEvent] = []
        if meta is not None:
            stored.append(ChannelDescribed(
                at_ms=0, guild_id=stream.guild_id, channel_id=stream.channel_id,
                channel_name=meta.channel_name, time_zone=meta.time_zone,
            ))
        stored.extend(e for _, e in store.events(stream) if isinstance(e, MessagePosted))
        return stream, meta.channel_name if meta else str(stream), stored
    finally:
        store.backend.close()


def with_answers(
    posts: Sequence[MessagePosted], answered: Sequence[int], assumptions: ReplyAssumptions
) -> tuple[list[MessagePosted], dict[int, str]]:
    """The chat with Eva's answer posted after each answered message, renumbered, and the
    new-message text of each question by its new index."""
    asked = set(answered)
    delay_ms = int(
        (assumptions.tool_rounds * assumptions.round_seconds + ANSWER_SECONDS) * 1000
    )
    answer = (ANSWER_TEXT * (assumptions.answer_bytes // len(ANSWER_TEXT) + 1))[
        : assumptions.answer_bytes
    ].rstrip()
    out: list[MessagePosted] = []
    questions: dict[int, str] = {}
    for position, post in enumerate(posts):
        out.append(msgspec.structs.replace(post, index=len(out)))
        if post.index not in asked:
            continue
        questions[len(out) - 1] = new_message_text(post.author_name, post.at_ms, post.content)
        following = posts[position + 1].at_ms if position + 1 < len(posts) else None
        at_ms = post.at_ms + delay_ms
        if following is not None:
            at_ms = min(at_ms, following)
        out.append(MessagePosted(
            at_ms=at_ms, index=len(out), message_id=EVA_MESSAGE_IDS + len(questions),
            author_id=EVA_AUTHOR_ID, author_name=EVA_NAME, bot=True, content=answer,
        ))
    return out, questions


def play(
    others: Sequence[AnyEvent], posts: Sequence[MessagePosted], stream: StreamId,
    settings: MemorySettings, merge_share: float = 1.0,
) -> list[AnyEvent]:
    """The channel's whole log after playing `posts` on their own clock, offline, merged
    lines held to `merge_share` of the limit as the line model is asked to."""
    with tempfile.TemporaryDirectory(prefix="eva-plan-") as directory:
        backend = open_backend(Path(directory))
        try:
            store = EventStore(backend)
            if others:
                store.append(stream, list(others))
            summarizer = OfflineSummarizer(
                settings.line_limit, int(settings.line_limit * merge_share)
            )
            memory = Memory(store, stream, summarizer, settings)
            trio.run(memory.play, posts)
            return [event for _, event in store.events(stream)]
        finally:
            backend.close()


# -- the plan ------------------------------------------------------------------------


def variants(models: ModelSettings) -> list[Variant]:
    """What to price: every layout of each reply model, replies as sent before, and the
    default layout kept warm; the default settings first."""
    default = Variant(models.reply_model, models.cache_layout)
    warm_layout = models.cache_layout if models.cache_layout in ("long", "split", "1h") else "long"
    names = [models.reply_model, *(m for m in MODELS if m != models.reply_model)]
    out = [default]
    for model in names:
        for layout in CACHE_LAYOUTS:
            variant = Variant(model, layout)
            if variant != default:
                out.append(variant)
        out.append(Variant(model, "5m", chunked_tail=False))
        out.append(Variant(model, warm_layout, keep_warm_hours=2.0))
    return out


MOST_MESSAGES_PER_MONTH = 10_000_000
"""A rate no channel reaches (some 230 messages a minute, day and night)."""


def assumptions_of(args: argparse.Namespace) -> ReplyAssumptions:
    for name in ("replies_per_month", "tool_result_bytes", "answer_bytes", "thinking_tokens"):
        if getattr(args, name) < 0:
            raise UserError(f"--{name.replace('_', '-')} must not be negative")
    if not 0 <= args.tool_rounds <= 16:
        raise UserError("--tool-rounds must be between 0 and 16")
    for name in ("check_share", "recall_finds"):
        if not 0 <= getattr(args, name) <= 1:  # NaN too
            raise UserError(f"--{name.replace('_', '-')} must be between 0 and 1")
    return ReplyAssumptions(
        check_share=args.check_share,
        recall_finds=args.recall_finds,
        tool_rounds=args.tool_rounds,
        tool_result_bytes=args.tool_result_bytes,
        answer_bytes=args.answer_bytes,
        thinking_tokens=args.thinking_tokens,
    )


MOST_ROW_SHARE = 4.0
"""The largest share of the row's marks `--rows` takes."""


def row_shares(text: str) -> list[float]:
    """The shares `--rows` names, the settings' own (1) first, each once."""
    try:
        shares = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"--rows takes shares such as {ROW_SHARES}, not {text!r}") from None
    if not all(0 < share <= MOST_ROW_SHARE for share in shares):  # NaN too
        raise UserError(f"--rows: each share must be above 0 and at most {MOST_ROW_SHARE:g}")
    return [1.0, *dict.fromkeys(share for share in shares if share != 1.0)]


def scaled_row(settings: MemorySettings, share: float) -> MemorySettings:
    """The settings with the row's marks at `share` of theirs."""
    return msgspec.structs.replace(
        settings,
        row_low_bytes=max(1, round(settings.row_low_bytes * share)),
        row_high_bytes=max(1, round(settings.row_high_bytes * share)),
    )


def _check_writable(path: Path) -> None:
    """A UserError if `path` could not be written as a file."""
    folder = path.parent
    if path.is_dir() or not folder.is_dir() or not os.access(folder, os.W_OK) or (
        path.exists() and not os.access(path, os.W_OK)
    ):
        raise UserError(f"cannot write the chart to {path}: no such folder, or no permission")


def run_plan(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    settings = load_settings(args.settings)
    models = load_model_settings(args.settings)
    assumptions = assumptions_of(args)
    shares = row_shares(args.rows)
    if args.chart is not None:
        _check_writable(args.chart)  # before the minutes of playing, not after
    stream, name, events = channel_posts(args)
    posts = [e for e in events if isinstance(e, MessagePosted)]
    if not posts:
        raise UserError("the channel holds no messages: nothing to plan")
    if args.messages_per_month is not None:
        if not 1 <= args.messages_per_month <= MOST_MESSAGES_PER_MONTH:  # NaN too
            raise UserError(
                f"--messages-per-month must be from 1 to {MOST_MESSAGES_PER_MONTH:,}"
            )
        posts = at_rate(posts, args.messages_per_month)
    others = [e for e in events if not isinstance(e, MessagePosted)]
    only = [p.index for p in posts if not p.bot and MENTION.search(p.content)] if (
        args.mentions_only
    ) else None
    if only == []:
        raise UserError(
            "no message of the channel names Eva: with --mentions-only there is nothing "
            "to answer"
        )
    answered = place_replies(posts, args.replies_per_month, args.seed, only)
    chat, questions = with_answers(posts, answered, assumptions)
    texts = PromptTexts(
        system=SYSTEM_PROMPT,
        tools=TOOLS_TEXT,
        tools_overhead_tokens=TOOL_USE_SYSTEM_TOKENS,
        empty_tail=EMPTY_TAIL_TEXT,
        budget_tokens=models.reply_prompt_tokens_max,
    )
    meta_zone = next((e.time_zone for e in others if isinstance(e, ChannelDescribed)), None)
    channel = _Channel(stream, others, chat, questions, meta_zone, texts, args.seed)
    say(f"playing {len(chat):,} messages ({len(answered):,} of them answered) offline")
    timeline, tree = channel.played(settings, models)
    months = timeline.months
    ways = variants(models)
    say(f"pricing {len(timeline.turns):,} replies {len(ways)} ways")
    bills = [
        bill_variant(timeline, variant, models.prices.get(variant.model), texts, assumptions)
        for variant in ways
    ]
    summaries = [summarize(bill, tree, months, timeline.zoom_depths) for bill in bills]
    rows = [channel.row_figures(timeline, tree, settings, models, assumptions)]
    for share in shares[1:]:
        smaller = scaled_row(settings, share)
        say(f"playing it again with a row of {kib(smaller.row_low_bytes)}-"
            f"{kib(smaller.row_high_bytes)} KiB")
        played, played_tree = channel.played(smaller, models)
        rows.append(channel.row_figures(played, played_tree, smaller, models, assumptions))
    if args.chart is not None:
        title = (f"eva plan: #{name}, {summaries[0].name}, dollars a day "
                 f"(${summaries[0].usd_per_month:.2f} a month)")
        try:
            args.chart.write_text(daily_usd_svg(usd_by_day(bills[0], tree), title))
        except OSError as error:
            raise UserError(f"cannot write {args.chart}: {error.strerror or error}") from None
    result = plan_json(name, posts, months, answered, assumptions, models, tree, summaries)
    result.update(rows_json(rows, models.line_model in models.prices, assumptions.recall_finds))
    result["seconds"] = round(time.perf_counter() - started, 1)
    if args.json:
        print_json(result)
    else:
        print(describe_plan(result))
    return 0


class _Channel:
    """The channel as `eva plan` plays it, with Eva's answers: played again for each row."""

    def __init__(
        self,
        stream: StreamId,
        others: Sequence[AnyEvent],
        chat: Sequence[MessagePosted],
        questions: dict[int, str],
        time_zone: str | None,
        texts: PromptTexts,
        seed: int,
    ) -> None:
        self.stream, self.others, self.chat, self.questions = stream, others, chat, questions
        self.time_zone, self.texts, self.seed = time_zone, texts, seed

    def played(self, settings: MemorySettings, models: ModelSettings) -> tuple[Timeline, TreeBill]:
        """Each reply's prompt and the tree's bill, the channel played with `settings`."""
        log = play(self.others, self.chat, self.stream, settings, models.line_target_share)
        tz = channel_zone(None, msgspec.structs.replace(settings, time_zone=self.time_zone or ""))
        reply_price = models.prices.get(models.reply_model)
        per = reply_price.bytes_per_token if reply_price is not None else BYTES_PER_TOKEN
        timeline = read_timeline(
            log, self.questions, self.texts, settings.prompt_tail_max_bytes, per, tz, self.seed
        )
        line_price = models.prices.get(models.line_model)
        line_per = line_price.bytes_per_token if line_price is not None else BYTES_PER_TOKEN
        tree = bill_tree(
            log, line_price, estimate_tokens(LINE_INSTRUCTIONS, line_per),
            settings.tasks_per_request, models.use_batches,
        )
        return timeline, tree

    def row_figures(
        self,
        timeline: Timeline,
        tree: TreeBill,
        settings: MemorySettings,
        models: ModelSettings,
        assumptions: ReplyAssumptions,
    ) -> RowFigures:
        """A played row's month with the default model and layout, counted each way."""
        variant = Variant(models.reply_model, models.cache_layout)
        return row_figures(
            timeline, tree, variant, models.prices.get(models.reply_model), self.texts,
            assumptions, (settings.row_low_bytes, settings.row_high_bytes),
        )
