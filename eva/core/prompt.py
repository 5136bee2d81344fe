# The shape of a reply's prompt: which parts it has, which carry cache marks, how big it is.
#
# Pure: it is handed texts and settings as values and returns parts and
# numbers. The reply path (eva.model.reply) sends exactly these parts and the
# planner (eva.plan.server_month) prices exactly these parts, so what is planned is
# what is sent. It may not know the tokenizer: tokens are estimated from UTF-8
# bytes with a bytes-per-token figure the caller gives (a setting per model).
# Invariants: the parts come in cache order (tools, system, memory row, tail
# chunks, the new message); at most four marks, and no one-hour mark after a
# five-minute one (see eva.plan.cache_model); the tail's chunks joined are the
# tail, and earlier chunks never change between two prompts of one row, so
# a reply reads the tail the previous reply wrote.
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias

from eva.core.block import cut_note, lines_over_cap, memory_row

CacheLayout: TypeAlias = Literal["long", "split", "5m", "1h", "none"]
CACHE_LAYOUTS: tuple[CacheLayout, ...] = ("long", "split", "5m", "1h", "none")
"""long: one-hour entries on everything a later reply reads (tools, system, row, tail), five
minutes on a tool result, read only by the next round; split: one hour on what changes only at
a publish (tools, system, row), five minutes from the tail on; 5m and 1h: every entry that
long; none: no cache marks at all."""

PartKind: TypeAlias = Literal["system", "row", "tail", "question", "tool_result"]

CUT_STEP_BYTES = 16 * 1024
"""The tail is cut only where its bytes pass a multiple of this, or of a quarter of its cap if
that is less (see `on_grid`); the newest message always stays."""

UPPER_BOUND_ASCII_BYTES_PER_TOKEN = 2.0
"""The prompt guard counts plain ASCII at this many bytes a token, fewer than any real text
needs, so its figure is a ceiling, not an estimate."""
UPPER_BOUND_TOKENS_PER_OTHER_CHAR = 2
"""...and every other character (accents, CJK, emoji parts) as this many tokens."""


def estimate_tokens(text: str, bytes_per_token: float) -> int:
    """The tokens `text` likely counts: its UTF-8 bytes over `bytes_per_token`, rounded up."""
    return math.ceil(len(text.encode()) / bytes_per_token)


def tokens_at_most(text: str, bytes_per_token: float) -> int:
    """A ceiling on the tokens `text` counts, for the guard that keeps prompts under a tier.

    ASCII at UPPER_BOUND_ASCII_BYTES_PER_TOKEN bytes a token (or the caller's
    figure if it is lower), and every other character at
    UPPER_BOUND_TOKENS_PER_OTHER_CHAR tokens.
    """
    ascii_bytes = len(text.encode("ascii", "ignore"))
    other = len(text) - ascii_bytes
    per_token = min(bytes_per_token, UPPER_BOUND_ASCII_BYTES_PER_TOKEN)
    return math.ceil(ascii_bytes / per_token) + other * UPPER_BOUND_TOKENS_PER_OTHER_CHAR


@dataclass(frozen=True, slots=True)
class LayoutMarks:
    """The lifetime of the cache mark on each part of a reply's prompt (None: no mark)."""

    system: str | None
    """On the system prompt; it covers the tools before it as well."""
    row: str | None
    tail: str | None
    """On the last chunk of the tail."""
    tool_result: str | None
    """On the newest tool result, when another round may follow."""


def layout_marks(layout: str) -> LayoutMarks:
    """Where a layout puts its (at most four) marks, and how long each lives."""
    match layout:
        case "long":
            return LayoutMarks(system="1h", row="1h", tail="1h", tool_result="5m")
        case "split":
            return LayoutMarks(system="1h", row="1h", tail="5m", tool_result="5m")
        case "5m" | "1h":
            return LayoutMarks(system=layout, row=layout, tail=layout, tool_result=layout)
        case "none":
            return LayoutMarks(system=None, row=None, tail=None, tool_result=None)
    raise ValueError(f"cache layout must be one of {', '.join(CACHE_LAYOUTS)}, not {layout!r}")


@dataclass(frozen=True, slots=True)
class Part:
    """One text block of a reply's prompt, with its cache mark's lifetime."""

    kind: PartKind
    text: str
    ttl: str | None = None


@dataclass(frozen=True, slots=True)
class MemoryPrompt:
    """The memory as a reply's prompt uses it: the row block and the tail in chunks.

    `"".join(tail)` is the tail, each line ending with a newline. A chunk ends
    where an earlier prompt of the same row ended, so the prefix that prompt
    cached is a prefix of this one.
    """

    row: str
    tail: tuple[str, ...]
    tail_end: int = 0
    """The index past the tail's last message (0 when the tail is empty)."""

    @property
    def block(self) -> str:
        """The memory block as one text (what `eva memory` prints)."""
        tail = "".join(self.tail).removesuffix("\n")
        return f"{self.row}\n{tail}" if tail else self.row


def chunk_lines(
    lines: Sequence[tuple[int, str]], cuts: Sequence[int], note: str | None = None
) -> tuple[str, ...]:
    """The tail's rendered lines (index, line), split before each index in `cuts`.

    Every line ends with a newline, the last one too: a chunk that ends a prompt
    reads the same when a later prompt holds it in the middle. `note` (the
    notice of cut messages) opens the first chunk. Empty chunks are left out.
    """
    chunks: list[str] = []
    current: list[str] = [] if note is None else [note]
    bounds = iter(sorted(set(cuts)))
    bound = next(bounds, None)
    for index, line in lines:
        while bound is not None and index >= bound:
            if current:
                chunks.append("\n".join(current) + "\n")
                current = []
            bound = next(bounds, None)
        current.append(line)
    if current:
        chunks.append("\n".join(current) + "\n")
    return tuple(chunks)


def prompt_parts(
    layout: str,
    system: str,
    memory: MemoryPrompt,
    question: str,
    empty_tail: str = "(no messages after the memory above yet)",
) -> list[Part]:
    """The first request's parts after the tools: system, row, tail chunks, the question."""
    marks = layout_marks(layout)
    tail = memory.tail or (empty_tail,)
    return [
        Part("system", system, marks.system),
        Part("row", memory.row, marks.row),
        *(Part("tail", chunk) for chunk in tail[:-1]),
        Part("tail", tail[-1], marks.tail),
        Part("question", question),
    ]


@dataclass(frozen=True, slots=True)
class PromptBudget:
    """The most a reply's first request may hold, by the guard's ceiling on tokens."""

    tokens: int
    """The ceiling the whole first request must stay under."""
    fixed_tokens: int
    """What the memory does not hold: tools, system prompt, the new message."""
    bytes_per_token: float


@dataclass(frozen=True, slots=True)
class FittedMemory:
    """The row's lines and the tail's lines a prompt shows, with the notes of what it cut."""

    row_note: str | None
    row_lines: list[str]
    tail_note: str | None
    tail_lines: list[tuple[int, str]]


def row_cut_note(first_shown: int) -> str:
    """The line that stands in the row for the oldest lines left out of the prompt."""
    return (
        f"[the memory of messages before {first_shown} is not shown here, to keep the "
        "prompt within its size; recall reaches those messages]"
    )


def fit_memory(
    row_lines: Sequence[str],
    row_starts: Sequence[int],
    tail_lines: Sequence[tuple[int, str]],
    tail_cap_bytes: int,
    budget: PromptBudget | None,
) -> FittedMemory:
    """The memory a prompt shows: the tail within its byte cap, then, if the whole still
    passes the budget, fewer of the oldest tail lines, and last fewer of the oldest row lines.

    `row_starts` is the first message of each row line. Lines left out are named
    by a note (see eva.core.block.cut_note and `row_cut_note`).
    """
    first = lines_over_cap(tail_lines, tail_cap_bytes)
    row_first = 0
    if budget is not None:
        per = budget.bytes_per_token
        note_tokens = tokens_at_most(cut_note(0, 0), per) + 8  # indexes take a few more
        fixed = budget.fixed_tokens + tokens_at_most(memory_row([]), per) + 2 * note_tokens
        shown = "\n".join([*row_lines, *(line for _, line in tail_lines[first:])])
        if fixed + tokens_at_most(shown, per) + len(row_lines) + len(tail_lines) > budget.tokens:
            row_tokens = [tokens_at_most(line, per) + 1 for line in row_lines]
            line_tokens = [tokens_at_most(line, per) + 1 for _, line in tail_lines]
            first = max(
                first, tail_lines_to_cut(fixed + sum(row_tokens), line_tokens, budget.tokens)
            )
            if first == len(tail_lines):
                row_first = tail_lines_to_cut(fixed, row_tokens, budget.tokens)
    if 0 < first < len(tail_lines):
        step = max(1, min(CUT_STEP_BYTES, tail_cap_bytes // 4))
        first = min(on_grid(tail_lines, first, step), len(tail_lines) - 1)
    tail_note = cut_note(tail_lines[0][0], tail_lines[first - 1][0]) if first else None
    row_note = None
    if row_first:
        shown_from = [*row_starts, *(index for index, _ in tail_lines)][row_first:]
        row_note = row_cut_note(shown_from[0] if shown_from else 0)
    return FittedMemory(
        row_note=row_note,
        row_lines=list(row_lines[row_first:]),
        tail_note=tail_note,
        tail_lines=list(tail_lines[first:]),
    )


def on_grid(lines: Sequence[tuple[int, str]], first: int, step: int) -> int:
    """`first`, moved on to the first line that starts at a multiple of `step` bytes from the
    tail's start (or to the end).

    A tail cut at any line would move with every new message, and every move
    changes the prompt's prefix, so the cache is written again; cut on this
    grid, the tail's start stays put until it has grown by a whole step.
    """
    start = 0  # where line i starts, in bytes from the tail's start
    grid: int | None = None
    for i, (_, line) in enumerate(lines):
        if i == first:
            grid = -(-start // step) * step
        if grid is not None and start >= grid:
            return i
        start += len(line.encode()) + 1
    return len(lines)


def memory_prompt(
    row_lines: Sequence[str],
    tail_lines: Sequence[tuple[int, str]],
    tail_cap_bytes: int,
    budget: PromptBudget | None = None,
    cuts: Sequence[int] = (),
) -> MemoryPrompt:
    """The memory a prompt shows: the rendered row's lines (`START+SIZE DATE|text`) and the
    tail's (index, line), fitted (see `fit_memory`) and chunked at `cuts`."""
    starts = [int(line.partition("+")[0]) for line in row_lines]
    fitted = fit_memory(row_lines, starts, tail_lines, tail_cap_bytes, budget)
    row = fitted.row_lines if fitted.row_note is None else [fitted.row_note, *fitted.row_lines]
    return MemoryPrompt(
        row=memory_row(row),
        tail=chunk_lines(fitted.tail_lines, cuts, fitted.tail_note),
        tail_end=fitted.tail_lines[-1][0] + 1 if fitted.tail_lines else 0,
    )


def tail_lines_to_cut(
    fixed_tokens: int,
    line_tokens: Sequence[int],
    budget_tokens: int,
) -> int:
    """How many of the oldest tail lines to leave out so that the prompt fits `budget_tokens`.

    `fixed_tokens` is everything but the tail (tools, system, row, question, the
    notice of the cut); `line_tokens` each tail line's ceiling, oldest first.
    All of them when even the newest alone does not fit.
    """
    total = fixed_tokens + sum(line_tokens)
    cut = 0
    while total > budget_tokens and cut < len(line_tokens):
        total -= line_tokens[cut]
        cut += 1
    return cut
