# What a summarizer is asked, what it answers, and a summarizer that needs no model.
#
# Pure: the tasks and summaries are values; `Summarizer` is only a type (the
# shell's model client implements it under trio). No network, clock or
# randomness here: the offline summarizer is a deterministic function.
# Invariants: a line that lands is non-empty, not only whitespace, and at most
# the line limit in UTF-8 (`validate_line`); the offline summarizer's output
# always passes `validate_line` and keeps `Name:` prefixes while they fit.
from __future__ import annotations

import functools
import hashlib
import inspect
import re
from collections.abc import Sequence
from typing import Protocol, TypeAlias

import msgspec

from eva.core.address import Address
from eva.core.events import Usage
from eva.core.render import LINE_LIMIT_BYTES, cut_to_bytes, fits, utf8_size
from eva.core.salience import salient_line

OFFLINE_MODEL = "offline"
ELLIPSIS = "…"
PIECE_SEPARATOR = " / "
_MIN_BODY_BYTES = 12
_ELLIPSIS_BYTES = len(ELLIPSIS.encode())

_PIECE_BREAK = re.compile("\r\n|[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]| / ")
_OTHER_BREAK = re.compile("[\r\v\f\x1c\x1d\x1e\x85\u2028\u2029]")
"""The line breaks other than \\n (after a split at them, a part holds none)."""
_NAME_MOST = 80


class LeafTask(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Compress one message too long to be its own leaf; `text` is its rendered form."""

    address: Address
    name: str
    text: str


class MergeTask(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """Merge two sibling lines into their parent, reading only those two lines."""

    address: Address
    left_text: str
    right_text: str


Task: TypeAlias = LeafTask | MergeTask


class Summary(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The text a summarizer wrote for a task's address, and what it cost."""

    address: Address
    text: str
    model: str
    usage: Usage | None = None
    batch_usage: Usage | None = None
    """The part of `usage` charged through the Message Batches API, if any."""


_task_encoder = msgspec.msgpack.Encoder()


def task_fingerprint(task: Task, model: str, limit: int) -> bytes:
    """16 bytes that name exactly this task asked of `model` under `limit`.

    Two tasks share a fingerprint only if their kind, address and texts are
    the same, so a task whose text has changed since (an edit, a forget) never
    matches one sent before. The texts cannot be read back from it.
    """
    kind = b"leaf" if isinstance(task, LeafTask) else b"merge"
    digest = hashlib.blake2b(digest_size=16, person=b"eva-line-task")
    for part in (kind, model.encode(), str(limit).encode(), _task_encoder.encode(task)):
        digest.update(len(part).to_bytes(4, "big"))
        digest.update(part)
    return digest.digest()


class Summarizer(Protocol):
    """Anything that turns a batch of tasks into summaries, one per task, in order."""

    async def summarize(self, tasks: Sequence[Task], urgent: bool = True) -> list[Summary]:
        """The summaries of `tasks`; unless `urgent`, a slower, cheaper path may be taken."""
        ...


async def summarize_tasks(
    summarizer: Summarizer, tasks: Sequence[Task], urgent: bool = True
) -> list[Summary]:
    """`summarizer.summarize(tasks)`, saying `urgent=False` only to summarizers that take it."""
    if urgent or not _takes_urgent(type(summarizer)):
        return await summarizer.summarize(tasks)
    return await summarizer.summarize(tasks, urgent=False)


@functools.cache
def _takes_urgent(kind: type[Summarizer]) -> bool:
    return "urgent" in inspect.signature(kind.summarize).parameters


def line_problem(text: str, limit: int = LINE_LIMIT_BYTES) -> str | None:
    """Why `text` may not land as a line, or None when it may."""
    if not text.strip():
        return "the line is empty"
    size = utf8_size(text.strip())
    if size > limit:
        return f"the line is {size} bytes, over the limit of {limit}"
    return None


def validate_line(text: str, limit: int = LINE_LIMIT_BYTES) -> str | None:
    """The line to write from a summarizer's reply (trimmed), or None if it may not land."""
    return None if line_problem(text, limit) is not None else text.strip()


def _shorten(text: str, limit: int) -> str:
    """`text` if it fits, else its start cut at a word boundary and marked with an ellipsis."""
    if fits(text, limit):
        return text
    room = limit - _ELLIPSIS_BYTES
    cut = cut_to_bytes(text, room) if room > 0 else ""
    return f"{cut}{ELLIPSIS}" if cut else cut_to_bytes(text, limit)


class _Piece(msgspec.Struct, frozen=True):
    """One utterance of a line: who said it (if it says) and what."""

    name: str | None
    body: str

    def render(self) -> str:
        return self.body if self.name is None else f"{self.name}: {self.body}"

    def render_within(self, limit: int) -> str:
        if self.name is None:
            return _shorten(self.body, limit)
        prefix = f"{self.name}: "
        room = limit - utf8_size(prefix)
        if room < _ELLIPSIS_BYTES + 1:
            return _shorten(self.render(), limit)
        return prefix + _shorten(self.body, room)


def _pieces(text: str) -> list[_Piece]:
    """The utterances of a line, split at line breaks and at ` / `, empty ones dropped.

    A piece `Name: text` names its speaker: a name of 1 to 80 characters with
    no colon or line break that starts with neither a space nor a colon (the
    first colon of the piece ends it, so it is found without a search).
    """
    if _OTHER_BREAK.search(text) is None:  # only \n breaks it: split in C
        parts = [part for line in text.split("\n") for part in line.split(PIECE_SEPARATOR)]
    else:
        parts = _PIECE_BREAK.split(text)
    pieces: list[_Piece] = []
    for part in parts:
        part = part.strip()
        if not part:
            continue
        colon = part.find(":")
        if 0 < colon <= _NAME_MOST and part.startswith(" ", colon + 1):
            pieces.append(_Piece(part[:colon].strip(), part[colon + 2 :].strip()))
        else:
            pieces.append(_Piece(None, part))
    return pieces


def speaker_pieces(text: str) -> list[tuple[str | None, str]]:
    """A line's utterances as (speaker, words), by the rule of `_pieces` (None: unnamed)."""
    return [(piece.name, piece.body) for piece in _pieces(text)]


def _join_neighbours(pieces: Sequence[_Piece]) -> list[_Piece]:
    """Pieces with consecutive utterances of one speaker joined into one."""
    joined: list[_Piece] = []
    for piece in pieces:
        if joined and piece.name is not None and joined[-1].name == piece.name:
            joined[-1] = _Piece(piece.name, f"{joined[-1].body} {piece.body}")
        else:
            joined.append(piece)
    return joined


def _one_per_speaker(pieces: Sequence[_Piece]) -> list[_Piece]:
    """One piece per speaker in order of first appearance, unnamed text dropped."""
    bodies: dict[str, list[str]] = {}
    for piece in pieces:
        if piece.name is not None:
            bodies.setdefault(piece.name, []).append(piece.body)
    return [_Piece(name, " ".join(said)) for name, said in bodies.items()]


def _fair_shares(sizes: Sequence[int], budget: int) -> list[int]:
    """Byte shares of `budget`: small pieces keep their size, the rest split what is left."""
    shares = [0] * len(sizes)
    waiting = sorted(range(len(sizes)), key=lambda index: sizes[index])
    left = budget
    while waiting:
        equal_share = left // len(waiting)
        index = waiting[0]
        if sizes[index] > equal_share:
            for index in waiting:
                shares[index] = equal_share
            break
        shares[index] = sizes[index]
        left -= sizes[index]
        waiting.pop(0)
    return shares


def _fit_pieces(pieces: Sequence[_Piece], limit: int) -> str | None:
    """The pieces joined within `limit`, each cut to a fair share; None if one gets too little."""
    budget = limit - len(PIECE_SEPARATOR) * (len(pieces) - 1)
    whole = [piece.render() for piece in pieces]
    sizes = [len(text) if text.isascii() else len(text.encode()) for text in whole]
    shares = _fair_shares(sizes, budget)
    cut = [i for i, (size, share) in enumerate(zip(sizes, shares, strict=True)) if share < size]
    for position in cut:  # whether every piece cut keeps enough, before any is cut
        name = pieces[position].name
        name_bytes = 0 if name is None else utf8_size(name) + len(": ")
        if shares[position] < name_bytes + _MIN_BODY_BYTES:
            return None
    for position in cut:
        whole[position] = pieces[position].render_within(shares[position])
    return PIECE_SEPARATOR.join(whole)


def _merge_line(left_text: str, right_text: str, limit: int) -> str:
    pieces = _pieces(left_text) + _pieces(right_text)
    whole = PIECE_SEPARATOR.join(piece.render() for piece in _join_neighbours(pieces))
    if fits(whole, limit):
        return whole
    salient = salient_line([(p.name, p.body) for p in pieces], limit, PIECE_SEPARATOR)
    if salient is not None and salient.strip():
        return salient
    for shape in (_join_neighbours, _one_per_speaker):  # the second only if the first fails
        candidate = shape(pieces)
        if candidate:
            line = _fit_pieces(candidate, limit)
            if line is not None:
                return line
    names = list(dict.fromkeys(piece.name for piece in pieces if piece.name is not None))
    if names:
        return _shorten(", ".join(names), limit)
    return _shorten(" ".join(piece.body for piece in pieces), limit)


def _never_empty(text: str, limit: int) -> str:
    if text.strip():
        return text.strip()
    return ELLIPSIS if fits(ELLIPSIS, limit) else "."


def offline_line(task: Task, limit: int = LINE_LIMIT_BYTES) -> str:
    """A deterministic line for `task` made without a model.

    What fits whole is kept whole. Otherwise the most telling whole clauses are
    kept, every speaker's best one among them, in time order and credited by
    name (eva.core.salience). Only when not even that fits does it cut: a leaf
    keeps the start of its message; a merge keeps each utterance (`Name:
    text`) of both halves, cutting each to a fair share of the limit; when
    there are too many to keep them all with their names, it keeps one per
    speaker, and at worst the list of names.
    """
    if limit < 1:
        raise ValueError(f"the line limit must be at least 1 byte, not {limit}")
    match task:
        case LeafTask(text=text):
            flat = " ".join(text.split())
            chosen = None if fits(flat, limit) else salient_line(
                [(p.name, p.body) for p in _pieces(flat)], limit, PIECE_SEPARATOR
            )
            line = chosen if chosen else _shorten(flat, limit)
        case MergeTask(left_text=left_text, right_text=right_text):
            line = _merge_line(left_text, right_text, limit)
    return _never_empty(line, limit)


class OfflineSummarizer:
    """A `Summarizer` that needs no model: `offline_line` for every task.

    `merge_limit` (default: the limit) holds merged lines shorter, as a line
    model asked for a smaller target would (ModelSettings.line_target_share);
    `eva plan` plays with it so that its tree glues where the model's would.
    """

    def __init__(self, limit: int = LINE_LIMIT_BYTES, merge_limit: int | None = None) -> None:
        self.limit = limit
        self.merge_limit = limit if merge_limit is None else min(limit, merge_limit)

    async def summarize(self, tasks: Sequence[Task], urgent: bool = True) -> list[Summary]:
        """The offline summaries of `tasks`, in order (urgent or not, the same)."""
        return [
            Summary(
                address=task.address,
                text=offline_line(
                    task, self.merge_limit if isinstance(task, MergeTask) else self.limit
                ),
                model=OFFLINE_MODEL,
            )
            for task in tasks
        ]
