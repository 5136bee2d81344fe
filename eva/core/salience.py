# Which words a line keeps when its two halves do not fit: whole clauses, the telling ones.
#
# Pure and deterministic. An offline merge used to keep the start of every utterance and
# cut each with "…"; here each utterance is split into clauses (at the ends of sentences,
# at dashes and around attachments), each clause scored by what makes it worth
# remembering (numbers, times and amounts, names and other capitalised words inside it,
# long and rare words, questions; a link or a file's name little; code, hashes,
# addresses and mention lists nothing, and a run of numbers with no words around them
# no more than one number), greetings and filler scoring nothing and a speaker's
# repeats (a bot's weekly reminder) counting once. First
# each speaker's best clause, whole, the speakers who said most first, while they fit;
# then the best of the rest; what is kept stays in time order and credited by name; room
# left over takes the best clause that did not fit, cut at a word with one mark. Only
# when not one clause fits whole does the caller cut.
from __future__ import annotations

import bisect
import functools
import re
from collections.abc import Sequence
from typing import NamedTuple

from eva.core.render import cut_to_bytes, utf8_size

ELLIPSIS = "\u2026"
_CLAUSE_END = re.compile(  # each way starts at white space: (?=\s) turns the rest away fast
    r"(?=\s)(?:(?<=[.!?;])\s+|\s+[\u2013\u2014]\s+|\s+-\s+|\s+(?=\[attachment: )|(?<=\])\s+)"
)
_ATTACHMENT = re.compile(r"\[attachment: [^\]]*\]")
_URL = re.compile(r"https?://\S+")
_CODE = re.compile(r"```.*?(?:```|$)|`[^`]+`", re.S)
BLOB_BYTES = 16
"""A token this long with letters and digits mixed is a hash, an address or a key."""
_MENTION = re.compile(r"<[@#][!&]?\w+(?:\|[^>]*)?>|@\S+")
_NUMBER = re.compile(r"\d+(?:[.,:]\d+)?")
_CAPITALISED = re.compile(r"\s([^\W\d_][\w'\u2019-]*)")  # a word after white space
_LONG_WORD = re.compile(r"[^\W\d_]{8,}")
_PLAIN_WORD = re.compile(r"[^\W\d_]{2,}")
NUMBER_WEIGHT = 4.0
NAME_WEIGHT = 1.5
NUMBERS_COUNTED = 4
ROOM_BYTES = 120
"""A clause's score is divided by 1 + its bytes over this: two short facts beat one long
line that holds one. The three were chosen on the demo chat (4,000 messages, seed 7) and
checked on another (2,000, seed 3): 67% of the planted facts kept in both."""
FILLER = frozenset(
    ["good morning", "morning", "morning all", "night all", "good night", "night", "lol",
     "haha", "hahaha", "ok", "okay", "yes", "yeah", "yep", "nope", "no", "nice", "same",
     "thanks", "thank you", "ty", "omg", "wow", "true", "agreed", "brb", "hi", "hey",
     "hello", "gm", "gn", "ha", "lmao", "cool", "sure", "yay", "oh no", "noooo", "+1"]
)
"""Whole clauses that say nothing worth keeping."""


class Unit(NamedTuple):
    """One clause of one utterance, in time order."""

    order: int
    speaker: str | None
    text: str
    score: float


def clauses(body: str) -> tuple[str, ...]:
    """`body`'s clauses: split after a sentence ends and around dashes (never empty: a
    body of no words is one clause of itself)."""
    parts = tuple(part.strip() for part in _CLAUSE_END.split(body) if part.strip())
    return parts or (body.strip(),)


@functools.lru_cache(maxsize=1 << 16)
def score(clause: str) -> float:
    """How much a clause is worth keeping: nothing for filler, more for each fact in it."""
    # a file's name or a link's path says little: the words around them are scored
    words = _ATTACHMENT.sub(" ", clause) if "[attachment: " in clause else clause
    links = "http" in words
    if links:
        words = _URL.sub(" ", words)
    # nor do code, logs, hashes and addresses: their digits are no facts to a reader of
    # one line, and mentions are names called, one or sixty
    if "`" in words:
        words = _CODE.sub(" ", words)
    words = " ".join(
        token for token in words.split()
        if len(token) < BLOB_BYTES or not _is_blob(token)
    )
    mentions = 0.0
    if "@" in words:
        words, called = _MENTION.subn(" ", words)
        mentions = 0.5 if called else 0.0
    bare = words.casefold().strip(" .!?,~*:;()")
    if not bare or bare in FILLER or len(bare) < 3:
        return 0.0
    value = 1.0 + mentions
    # a few numbers among words are facts; forty, or numbers with no words around them,
    # are a table or a log, worth no more than a few
    numbers = len(_NUMBER.findall(words))
    if numbers > 1:
        numbers = min(numbers, NUMBERS_COUNTED, 1 + len(_PLAIN_WORD.findall(words)))
    value += NUMBER_WEIGHT * numbers
    value += NAME_WEIGHT * len([w for w in _CAPITALISED.findall(f" {words}") if w[0].isupper()][1:])
    value += 0.5 * len(_LONG_WORD.findall(words))
    value += 1.0 if "?" in words else 0.0
    if links or "http" in clause:
        value += 0.5 * len(_URL.findall(clause))
    return value / (1.0 + len(clause) / ROOM_BYTES)  # a long clause must earn its room


def _is_blob(token: str) -> bool:
    return any(c.isdigit() for c in token) and any(c.isalpha() for c in token)


_WORD_CHARACTER = re.compile(r"[^\W_]")
"""A character `str.isalnum` says is a letter or a digit (`\\w` is those and `_`)."""


@functools.lru_cache(maxsize=1 << 16)
def _clause_facts(body: str) -> tuple[tuple[str, str, bool, float], ...]:
    """Each clause of `body` with what `units_of` asks of it: its words folded (how a
    repeat is known), whether it has a letter or digit, and its score. Cached: an
    utterance is read again by the merges above its line."""
    return tuple(
        (
            text,
            " ".join(text.casefold().split()),
            _WORD_CHARACTER.search(text) is not None,
            score(text),
        )
        for text in clauses(body)
    )


def units_of(pieces: Sequence[tuple[str | None, str]]) -> list[Unit]:
    """Every clause of every utterance, a speaker's repeats after the first dropped."""
    units: list[Unit] = []
    seen: set[tuple[str | None, str]] = set()
    for speaker, body in pieces:
        for text, folded, worded, value in _clause_facts(body):
            if not worded and units and units[-1].speaker == speaker:
                # "?" or "!!" after one's own words belongs to them
                last = units[-1]
                joined = f"{last.text} {text}"
                units[-1] = Unit(last.order, speaker, joined, score(joined))
                continue
            key = (speaker, folded)
            if folded and key in seen:
                continue
            seen.add(key)
            units.append(Unit(len(units), speaker, text, value))
    return units


def render(units: Sequence[Unit], separator: str) -> str:
    """Kept clauses in time order, a speaker's neighbouring ones under one name."""
    parts: list[tuple[str | None, list[str]]] = []
    for unit in sorted(units):
        if parts and parts[-1][0] == unit.speaker:
            parts[-1][1].append(unit.text)
        else:
            parts.append((unit.speaker, [unit.text]))
    return separator.join(
        " ".join(texts) if speaker is None else f"{speaker}: {' '.join(texts)}"
        for speaker, texts in parts
    )


def salient_line(
    pieces: Sequence[tuple[str | None, str]], limit: int, separator: str
) -> str | None:
    """The most telling whole clauses of `pieces` (speaker, words) within `limit` bytes:
    first each speaker's best clause, the speakers who said most first, while they fit;
    then the best of the rest. None when not one clause fits whole."""
    units = units_of(pieces)
    best: dict[str, Unit] = {}
    for unit in units:
        if unit.speaker is not None:
            kept = best.get(unit.speaker)
            if kept is None or unit.score > kept.score:
                best[unit.speaker] = unit
    firsts = sorted(best.values(), key=lambda u: (-u.score, u.order))
    rest = sorted(units, key=lambda u: (-u.score, u.order))
    chosen = _Chosen(separator)
    taken: set[int] = set()
    for unit in [*firsts, *rest]:
        if unit.order in taken or (unit.score <= 0 and chosen.units):
            continue  # filler only while nothing else is kept
        text_bytes = utf8_size(unit.text)
        if chosen.size + text_bytes + 1 > limit:  # it adds at least itself and a space
            continue
        if chosen.size_with(unit, text_bytes) <= limit:
            chosen.add(unit, text_bytes)
            taken.add(unit.order)
    if not chosen.units:
        return None
    return render(_filled(chosen.units, units, taken, limit, separator), separator)


class _Chosen:
    """The units kept so far, in time order, and the bytes `render` makes of them, which
    a unit added changes only where it goes: it joins a neighbour's run of one speaker,
    starts a run of its own, or splits a run of another speaker in two."""

    def __init__(self, separator: str) -> None:
        self.units: list[Unit] = []
        self.orders: list[int] = []
        self.size = 0
        self._separator_bytes = utf8_size(separator)

    def size_with(self, unit: Unit, text_bytes: int) -> int:
        """`utf8_size(render([*self.units, unit], separator))`, without rendering."""
        units = self.units
        if not units:
            return _name_bytes(unit.speaker) + text_bytes
        at = bisect.bisect_left(self.orders, unit.order)
        first, last = at == 0, at == len(units)
        before = None if first else units[at - 1].speaker
        after = None if last else units[at].speaker
        speaker = unit.speaker
        if not first and not last and before == after:  # inside one speaker's run
            if speaker == before:
                return self.size + text_bytes + 1
            split = 2 * self._separator_bytes + _name_bytes(before) - 1
            return self.size + split + _name_bytes(speaker) + text_bytes
        if (not first and speaker == before) or (not last and speaker == after):
            return self.size + text_bytes + 1
        return self.size + self._separator_bytes + _name_bytes(speaker) + text_bytes

    def add(self, unit: Unit, text_bytes: int) -> None:
        self.size = self.size_with(unit, text_bytes)
        at = bisect.bisect_left(self.orders, unit.order)
        self.orders.insert(at, unit.order)
        self.units.insert(at, unit)


def _name_bytes(speaker: str | None) -> int:
    """The bytes `Name: ` adds before a run of one speaker's clauses."""
    return 0 if speaker is None else utf8_size(speaker) + 2


FILL_FROM_BYTES = 64
"""Room left in a line from which the best clause that did not fit whole goes in cut."""


def _filled(
    chosen: list[Unit], units: Sequence[Unit], taken: set[int], limit: int, separator: str
) -> list[Unit]:
    """`chosen`, and with what room is left the best clause that did not fit whole, cut at
    a word with one mark: a line far too short loses memory for nothing."""
    left = limit - utf8_size(render(chosen, separator))
    if left < FILL_FROM_BYTES:
        return chosen
    for unit in sorted(units, key=lambda u: (-u.score, u.order)):
        if unit.order in taken or unit.score <= 0:
            continue
        for room in range(left, 0, -16):  # the name and separator it adds come out of it
            cut = cut_to_bytes(unit.text, max(room - len(ELLIPSIS.encode()), 0))
            if not cut:
                break
            trial = [*chosen, unit._replace(text=f"{cut}{ELLIPSIS}")]
            if utf8_size(render(trial, separator)) <= limit:
                return trial
        break
    return chosen
