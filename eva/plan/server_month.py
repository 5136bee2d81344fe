# What a server-month costs: Eva's replies placed in a channel's real timeline, priced
# request by request through a model of the prompt cache, and the tree's lines beside them.
#
# Pure: it is handed a played channel log (messages, lines, publishes), the
# messages Eva answers, the prompt's fixed texts and a price table, and returns
# bills. It may not know how the log was played or how replies were chosen
# (eva.cli.cmd_plan does both); it builds each reply's prompt with the same
# functions the reply path uses (eva.core.prompt), so what it prices is what
# Eva sends. Assumptions it cannot measure (how many tool rounds a reply
# takes, what a tool returns, how long an answer is) are one value,
# `ReplyAssumptions`, printed with every plan. How many rounds a reply needs
# is priced three ways (`ROUNDS`): the assumed count; zooming from the row
# line that covers the message the reply is about down to that message; and
# recall first, zooming only when recall misses.
# Invariants: a reply's requests are priced one by one (the long-prompt tier is
# per request); a model missing from the table is never priced; the same
# inputs give the same bills.
from __future__ import annotations

import hashlib
import math
from bisect import bisect_right
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import tzinfo
from typing import Literal

import msgspec

from eva.core.address import Address
from eva.core.block import ShownMessage, message_line
from eva.core.costs import cost_of
from eva.core.events import AnyEvent, LineWritten, MessagePosted, RowPublished, Usage
from eva.core.prices import BYTES_PER_TOKEN, Price
from eva.core.prompt import (
    PromptBudget,
    estimate_tokens,
    layout_marks,
    memory_prompt,
    tokens_at_most,
)
from eva.core.render import render_line
from eva.plan.cache_model import Block, CacheSimulator, RequestUsage, block_key
from eva.plan.tree_cost import DAY_MS

MONTH_DAYS = 30.4375
"""An average calendar month (365.25 / 12 days)."""
PLAN_USD = 15.0
"""What a server pays a month."""
PLAN_REPLIES = 1500
"""Replies a month included in the plan."""
SEED_FIGURE = "4,801 small-model calls, about $3, for 52,000 messages"
"""What the tree was first estimated to cost, printed beside the measured figure."""
PING_TEXT = "."
"""The whole user turn of a keep-warm request (max_tokens 1)."""
RECALL_FINDS = 0.85
"""The share of questions whose evidence Eva's recall tool shows in its 6,000 bytes
(scripts/eval_recall.py on its held-out questions, 2026-12-07)."""

Rounds = Literal["assumed", "zooming", "recall first"]
ROUNDS: tuple[Rounds, ...] = ("assumed", "zooming", "recall first")
"""How a reply's tool rounds are counted: `ReplyAssumptions.rounds_for`."""


@dataclass(frozen=True, slots=True)
class ReplyAssumptions:
    """What a reply is assumed to take beyond its prompt: nothing here is measured."""

    tool_rounds: int = 1
    """Rounds of tool use before the answer: each re-reads the whole prompt."""
    tool_result_bytes: int = 2_000
    """What one tool call brings back (a zoom about 1 KB, a recall up to 6 KB)."""
    tool_call_output_tokens: int = 60
    """Output of a round that calls a tool."""
    answer_bytes: int = 300
    """Eva's answer: a few chat sentences. It is also posted into the chat."""
    round_seconds: float = 4.0
    """Time between two requests of one reply."""
    thinking_tokens: int = 100
    """Output the model spends thinking in each request (billed as output; Eva asks for low
    effort, ModelSettings.reply_effort)."""
    check_share: float = 0.2
    """Share of replies that state a detail Eva did not read, and so get the round that asks
    her to check it (ModelSettings.check_guesses): her first answer, then a zoom round, then
    the answer again; two more requests, each re-reading the prompt."""
    recall_finds: float = RECALL_FINDS
    """With `recall first`: the share of replies whose one recall shows the message."""

    def checked(self, number: int) -> bool:
        """Whether reply `number` (0, 1, ...) is one of the `check_share` that are checked,
        spread evenly."""
        return _spread(number, self.check_share)

    def rounds_for(self, number: int, zooms: int, rounds: Rounds) -> int:
        """The tool rounds of reply `number`, about a message `zooms` below its row line.

        `assumed`: `tool_rounds` whatever the reply is about. `zooming`: one round a
        zoom, from the row line down to the message, and no fewer than `tool_rounds`.
        `recall first`: `tool_rounds` when recall finds the message (`recall_finds` of
        replies, spread evenly), those and the zooms when it does not.
        """
        if rounds == "assumed":
            return self.tool_rounds
        if rounds == "zooming":
            return max(self.tool_rounds, zooms)
        return self.tool_rounds + (0 if _spread(number, self.recall_finds) else zooms)

    def answer_tokens(self, bytes_per_token: float) -> int:
        return math.ceil(self.answer_bytes / bytes_per_token)


def _spread(number: int, share: float) -> bool:
    """Whether item `number` (0, 1, ...) is among a `share` of items spread evenly."""
    return math.floor((number + 1) * share) > math.floor(number * share)


@dataclass(frozen=True, slots=True)
class PromptTexts:
    """The parts of every reply's prompt that are not the channel's."""

    system: str
    tools: str
    """The tools' JSON as sent."""
    tools_overhead_tokens: int
    """Tokens the API adds to the system prompt when tools are offered."""
    empty_tail: str
    budget_tokens: int
    """The reply path's guard (ModelSettings.reply_prompt_tokens_max)."""


@dataclass(frozen=True, slots=True)
class Variant:
    """One way of answering to price: the model, the cache layout, and two options."""

    model: str
    layout: str
    chunked_tail: bool = True
    """The tail in chunks that end where earlier prompts ended (today's reply path); False:
    one block, as replies were sent before."""
    keep_warm_hours: float = 0.0
    """Refresh the row's entry with a one-token request before it expires, while someone
    has posted in the last this many hours (0: never)."""

    @property
    def name(self) -> str:
        extra = "" if self.chunked_tail else ", tail in one block"
        if self.keep_warm_hours:
            extra += f", kept warm {self.keep_warm_hours:g} h"
        return f"{self.model} {self.layout}{extra}"


@dataclass(frozen=True, slots=True)
class ReplyBill:
    """What one reply cost, and whether it found the row in the cache."""

    at_ms: int
    usd: float
    cold: bool
    requests: int
    read: int
    write: int
    uncached: int
    output: int
    largest_prompt: int


@dataclass(frozen=True, slots=True)
class PingBill:
    """A keep-warm request."""

    at_ms: int
    usd: float


@dataclass(frozen=True, slots=True)
class _Turn:
    """A reply's first prompt as block texts' keys and sizes: the same for every variant."""

    at_ms: int
    row: tuple[str, int]
    """(key, bytes) of the row block."""
    tail: tuple[tuple[str, int], ...]
    question: tuple[str, int]
    zooms: int = 0
    """Zooms from the row line that covers the message the reply is about down to it."""


@dataclass(slots=True)
class Timeline:
    """The played log as the planner reads it: each reply's prompt and when people posted."""

    turns: list[_Turn] = field(default_factory=list)
    turns_one_block: list[_Turn] = field(default_factory=list)
    post_times: list[int] = field(default_factory=list)
    publish_times: list[int] = field(default_factory=list)
    zoom_depths: list[float] = field(default_factory=list)
    """Per reply: how many zooms lead from the row to one of the messages it covers, on
    average over those messages (a line of 2^k messages is k zooms above each)."""
    zooms: list[int] = field(default_factory=list)
    """Per reply: the zooms down to the one message it is about (`about_message`)."""
    first_ms: int = 0
    last_ms: int = 0

    @property
    def months(self) -> float:
        """The months the log spans (at least one day's worth)."""
        return max(self.last_ms - self.first_ms, DAY_MS) / DAY_MS / MONTH_DAYS


def _sized(text: str) -> tuple[str, int]:
    return block_key(text), len(text.encode())


def read_timeline(
    log: Iterable[AnyEvent],
    questions: Mapping[int, str],
    texts: PromptTexts,
    tail_cap_bytes: int,
    bytes_per_token: float,
    tz: tzinfo,
    seed: int = 1,
) -> Timeline:
    """Each answered message's first prompt, as the reply path would build it then.

    `questions` maps the index of each message Eva answers to the new-message
    text of its request. The row is the one last published before it; the tail
    runs from that row's frontier to the question, fitted by the reply path's
    own guard and cut in chunks where this row's earlier prompts ended. Each
    reply is also given the message of the row it is about (`about_message`,
    drawn with `seed`), and the zooms down to it.
    """
    timeline = Timeline()
    rendered: dict[tuple[int, int], str] = {}
    row_lines: list[str] = []
    row_starts: list[int] = []
    row_sizes: list[int] = []
    tail: list[tuple[int, str]] = []
    cuts: list[int] = []
    depth = 0.0
    fixed = (
        tokens_at_most(texts.tools, bytes_per_token)
        + texts.tools_overhead_tokens
        + tokens_at_most(texts.system, bytes_per_token)
    )
    for event in log:
        if isinstance(event, LineWritten):
            rendered[(event.start, event.size)] = render_line(
                Address(event.start, event.size), event.text, event.first_ms, event.last_ms, tz
            )
        elif isinstance(event, RowPublished):
            row_lines = [rendered[(start, size)] for start, size in event.entries]
            row_starts = [start for start, _ in event.entries]
            row_sizes = [size for _, size in event.entries]
            depth = zoom_depth(row_sizes)
            timeline.publish_times.append(event.at_ms)
            tail = [line for line in tail if line[0] >= event.frontier]
            cuts = []
        elif isinstance(event, MessagePosted):
            if not timeline.post_times:
                timeline.first_ms = event.at_ms
            timeline.last_ms = event.at_ms
            if not event.bot:
                timeline.post_times.append(event.at_ms)
            tail.append((event.index, message_line(_shown(event), tz)))
            question = questions.get(event.index)
            if question is None:
                continue
            budget = PromptBudget(
                tokens=texts.budget_tokens,
                fixed_tokens=fixed + tokens_at_most(question, bytes_per_token),
                bytes_per_token=bytes_per_token,
            )
            timeline.zoom_depths.append(depth)
            zooms = about_message(row_starts, row_sizes, seed, event.index)
            timeline.zooms.append(zooms)
            memory = memory_prompt(row_lines, tail, tail_cap_bytes, budget, cuts)
            whole = "".join(memory.tail)
            if memory.tail_end and (not cuts or memory.tail_end > cuts[-1]):
                cuts.append(memory.tail_end)
            row = _sized(memory.row)
            for turns, tail_chunks in ((timeline.turns, memory.tail),
                                       (timeline.turns_one_block, (whole,) if whole else ())):
                turns.append(
                    _Turn(
                        at_ms=event.at_ms,
                        row=row,
                        tail=tuple(_sized(chunk) for chunk in (tail_chunks or (texts.empty_tail,))),
                        question=_sized(question),
                        zooms=zooms,
                    )
                )
    return timeline


def about_message(
    starts: Sequence[int], sizes: Sequence[int], seed: int, question: int
) -> int:
    """The zooms from a row (its lines' first messages and sizes, oldest first) down to
    the message that the reply to message `question` is about: one of the row's
    messages, each as likely (drawn with `seed`), so that a line of 2^k messages is k
    zooms above each of its own. 0 without a row."""
    if not starts:
        return 0
    covered = starts[-1] + sizes[-1]
    wanted = int.from_bytes(_draw(seed, question, "about"), "big") % covered
    return sizes[bisect_right(starts, wanted) - 1].bit_length() - 1


def zoom_depth(sizes: Sequence[int]) -> float:
    """The zooms from a row of lines of these sizes down to one message, on average over
    the messages the row covers."""
    covered = sum(sizes)
    if not covered:
        return 0.0
    return sum(size * math.log2(size) for size in sizes) / covered


def _shown(post: MessagePosted) -> ShownMessage:
    return ShownMessage(
        index=post.index,
        at_ms=post.at_ms,
        author_name=post.author_name,
        content=post.content,
        attachments=post.attachments,
        edited=post.edited_at_ms is not None,
    )


@dataclass(slots=True)
class VariantBill:
    """Every reply and keep-warm request of one variant."""

    variant: Variant
    priced: bool
    replies: list[ReplyBill] = field(default_factory=list)
    pings: list[PingBill] = field(default_factory=list)


def bill_variant(
    timeline: Timeline,
    variant: Variant,
    price: Price | None,
    texts: PromptTexts,
    assumptions: ReplyAssumptions,
    rounds_by: Rounds = "assumed",
) -> VariantBill:
    """Send every reply of `timeline` the way `variant` says, through one prompt cache.

    A reply is its first request, then its tool rounds (counted as `rounds_by`
    says, see ReplyAssumptions.rounds_for), each with the previous round's tool
    call and result added. Without a price the requests are still counted, at
    zero dollars.
    """
    per = price.bytes_per_token if price is not None else BYTES_PER_TOKEN
    cache = CacheSimulator(min_tokens=price.min_cache_tokens if price is not None else 0)
    marks = layout_marks(variant.layout)
    tools = Block(
        estimate_tokens(texts.tools, per) + texts.tools_overhead_tokens, block_key(texts.tools)
    )
    system = Block(estimate_tokens(texts.system, per), block_key(texts.system), marks.system)
    result_tokens = math.ceil(assumptions.tool_result_bytes / per)
    answer_tokens = assumptions.answer_tokens(per)
    bill = VariantBill(variant=variant, priced=price is not None)
    turns = timeline.turns if variant.chunked_tail else timeline.turns_one_block
    warm = _KeepWarm(variant.keep_warm_hours, timeline.post_times, timeline.publish_times)

    def tokens(sized: tuple[str, int]) -> int:
        return math.ceil(sized[1] / per)

    for number, turn in enumerate(turns):
        row = Block(tokens(turn.row), turn.row[0], marks.row)
        for ping_at, row_block in warm.due(turn.at_ms):
            used = cache.request([tools, system, row_block, Block(1, PING_TEXT)], ping_at / 1000)
            bill.pings.append(PingBill(ping_at, _usd(used.usage(1), price)))
        tail = [Block(tokens(chunk), chunk[0]) for chunk in turn.tail]
        tail[-1] = Block(tail[-1].tokens, tail[-1].key, marks.tail)
        blocks = [tools, system, row, *tail, Block(tokens(turn.question), turn.question[0])]
        rounds = assumptions.rounds_for(number, turn.zooms, rounds_by) + (
            2 if assumptions.checked(number) else 0
        )
        warm_tokens = tools.tokens + system.tokens + row.tokens
        bill.replies.append(_bill_reply(
            cache, blocks, turn.at_ms, rounds, warm_tokens, price, assumptions, marks.tool_result,
            (answer_tokens, result_tokens),
        ))
        warm.replied(turn.at_ms + rounds * int(assumptions.round_seconds * 1000), row)
    return bill


def _bill_reply(
    cache: CacheSimulator,
    blocks: list[Block],
    at_ms: int,
    rounds: int,
    warm_tokens: int,
    price: Price | None,
    assumptions: ReplyAssumptions,
    result_ttl: str | None,
    sizes: tuple[int, int],
) -> ReplyBill:
    """One reply's requests through the cache: the first, then `rounds` more, each with the
    round before's tool call and result added (the newest result marked `result_ttl`
    while another round follows). `sizes`: the answer's and a tool result's tokens. The
    reply is cold when its first request read less than `warm_tokens` from the cache."""
    answer_tokens, result_tokens = sizes
    total = RequestUsage()
    usd = 0.0
    output = largest = 0
    cold = True
    for round_number in range(rounds + 1):
        used = cache.request(blocks, at_ms / 1000 + round_number * assumptions.round_seconds)
        out = assumptions.thinking_tokens + (
            answer_tokens if round_number == rounds else assumptions.tool_call_output_tokens
        )
        usd += _usd(used.usage(out), price)
        output += out
        largest = max(largest, used.total)
        if round_number == 0:
            cold = used.read < warm_tokens
        total = RequestUsage(
            read=total.read + used.read,
            write_5m=total.write_5m + used.write_5m,
            write_1h=total.write_1h + used.write_1h,
            uncached=total.uncached + used.uncached,
        )
        if round_number < rounds:
            ttl = None if round_number + 1 == rounds else result_ttl
            blocks = [
                *(Block(b.tokens, b.key) if b.key.startswith("result:") else b for b in blocks),
                Block(assumptions.tool_call_output_tokens, f"call:{at_ms}:{round_number}"),
                Block(result_tokens, f"result:{at_ms}:{round_number}", ttl),
            ]
    return ReplyBill(
        at_ms=at_ms,
        usd=usd,
        cold=cold,
        requests=rounds + 1,
        read=total.read,
        write=total.write,
        uncached=total.uncached,
        output=output,
        largest_prompt=largest,
    )


def _usd(usage: Usage, price: Price | None) -> float:
    return 0.0 if price is None else cost_of(usage, price)


@dataclass(slots=True)
class _KeepWarm:
    """When to refresh the row's one-hour entry: five minutes before it would expire, while
    the row is the same and someone posted within `hours`."""

    hours: float
    post_times: list[int]
    publish_times: list[int]
    at_ms: int | None = None
    row: Block | None = None

    LEAD_MS = 5 * 60_000
    LIFE_MS = 3_600_000

    def replied(self, at_ms: int, row: Block) -> None:
        if self.hours and row.ttl == "1h":
            self.at_ms, self.row = at_ms, row

    def due(self, until_ms: int) -> Iterable[tuple[int, Block]]:
        """The pings to send before `until_ms`: none once a publish replaced the row."""
        while self.at_ms is not None and self.row is not None:
            ping = self.at_ms + self.LIFE_MS - self.LEAD_MS
            if ping >= until_ms:
                return
            recent = bisect_right(self.post_times, ping) - 1
            published = bisect_right(self.publish_times, ping) - bisect_right(
                self.publish_times, self.at_ms
            )
            if (
                published
                or recent < 0
                or ping - self.post_times[recent] > self.hours * 3_600_000
            ):
                self.at_ms = None
                return
            self.at_ms = ping
            yield ping, self.row


# -- placing replies ------------------------------------------------------------------


def at_rate(posts: Sequence[MessagePosted], per_month: float) -> list[MessagePosted]:
    """The same chat with its clock run faster or slower, so that people post `per_month`
    messages a month: every gap between two messages scaled alike, bursts kept bursts."""
    people = [post for post in posts if not post.bot]
    if len(people) < 2 or per_month <= 0:
        return list(posts)
    first = people[0].at_ms
    span_days = max(people[-1].at_ms - first, 1) / DAY_MS
    scale = (len(people) / per_month * MONTH_DAYS) / span_days
    return [
        msgspec.structs.replace(post, at_ms=first + round((post.at_ms - first) * scale))
        for post in posts
    ]


def place_replies(
    posts: Sequence[MessagePosted], per_month: int, seed: int, only: Iterable[int] | None = None
) -> list[int]:
    """The indexes of the messages Eva answers: `per_month` a month over the posts' span,
    chosen among `only` (default: every message by a person) evenly at random, so busy
    stretches get more replies in proportion. The same seed gives the same choice.
    """
    people = [post for post in posts if not post.bot]
    if not people:
        return []
    span = max(people[-1].at_ms - people[0].at_ms, DAY_MS) / DAY_MS / MONTH_DAYS
    wanted = round(per_month * span)
    pool = [post.index for post in people] if only is None else sorted(set(only))
    if wanted >= len(pool):
        return pool
    ranked = sorted(pool, key=lambda index: _draw(seed, index))
    return sorted(ranked[:wanted])


def _draw(seed: int, index: int, what: str = "") -> bytes:
    """A number drawn for message `index` with `seed`: the same every time, unrelated to
    the one drawn for another `what`."""
    key = f"{seed}:{index}" if not what else f"{seed}:{what}:{index}"
    return hashlib.blake2b(key.encode(), digest_size=8).digest()
