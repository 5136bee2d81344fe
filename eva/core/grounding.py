# Did Eva read it, or guess? The details a reply states, matched against what she read.
#
# Pure. A reply's details are its links, quoted phrases, times, dates, numbers and
# amounts, and the names of people and places (capitalised words that do not open a
# sentence, and any word that is the name of someone in the channel). Each is looked for
# in what Eva read word for word in that turn (the tail, the new message, whole messages
# opened by zoom, recall's hits) and then in the summary lines she saw (the row, halves
# opened by zoom): found in the first it is `read`, only in the second `summary`,
# nowhere `unsupported`. Matching forgives what writing forgives: case, accents,
# "10am" for "10:00", "1,200" for "1200", a quote that runs over two messages.
from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterable, Sequence
from typing import Literal

import msgspec

DetailKind = Literal["read", "summary", "unsupported"]


class Detail(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One detail a reply states, and where Eva had it from."""

    text: str
    kind: DetailKind


class Grounding(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """A reply's details and how many of each kind. Kept in the reply's record: fields
    are only ever added at the end, with a default."""

    details: tuple[Detail, ...] = ()
    read: int = 0
    summary: int = 0
    unsupported: int = 0

    @property
    def guessed(self) -> bool:
        """Whether the reply states a detail Eva did not read word for word."""
        return bool(self.summary or self.unsupported)


_URL = re.compile(r"https?://[^\s<>()\"']+")
_QUOTE = re.compile(r"[\"“”«»]([^\"“”«»\n]{3,200})[\"“”«»]")
_TIME = re.compile(
    r"\b(\d{1,2})(?::(\d{2}))?\s*([ap])\.?m\.?\b|\b(\d{1,2}):(\d{2})\b", re.IGNORECASE
)
_ISO_DATE = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august",
           "september", "october", "november", "december"]
_DAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_CALENDAR_WORDS = frozenset(
    [*_MONTHS, *_DAYS, *(m[:3] for m in _MONTHS), *(d[:3] for d in _DAYS), "sept", "tues",
     "thur", "thurs", "today", "tomorrow", "yesterday"]
)
_MONTH_DAY = re.compile(
    r"\b(" + "|".join(m[:3] + r"[a-z]*" for m in _MONTHS) + r")\.?\s+(\d{1,2})(?:st|nd|rd|th)?\b"
    r"|\b(\d{1,2})(?:st|nd|rd|th)?\s+(?:of\s+)?(" + "|".join(m[:3] + r"[a-z]*" for m in _MONTHS)
    + r")\b",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"(?<![\w.])[$€£]?\d[\d,]*(?:\.\d+)?(?:\s?%)?(?![\w])")
_WORD = re.compile("[^\\W\\d_][\\w'\u2019-]*", re.UNICODE)
_SENTENCE_START = re.compile("(?:^|[.!?:;]\\s+|\\n\\s*)([^\\W\\d_][\\w'\u2019-]*)")
# the head of a message as Eva reads it ("[12] 2025-03-14 09:58 Maya: ") or of a row line
# ("0+64 2025-03-01..2025-03-09|"): taken off so a quote can run from one message on
_HEAD = re.compile(r"^\s*(?:\[\d+\]\s+\S+\s+\S+\s+[^:\n]{1,80}:\s|\d+\+\d+\s+\S+\|)")
NOT_NAMES = frozenset(
    ["i", "i'm", "i've", "i'll", "i'd", "eva", "ok", "okay", "yes", "no", "hi", "hey",
     "hello", "thanks", "sure", "the", "a", "an", "and", "but", "so", "it's", "that's",
     "there's", "here's", "let's"]
)
"""Capitalised words that name nobody."""


def fold(text: str) -> str:
    """`text` for matching: case folded, accents gone, every run of spaces one space."""
    decomposed = unicodedata.normalize("NFKD", text.casefold())
    bare = "".join(c for c in decomposed if not unicodedata.combining(c))
    return " ".join(bare.replace("\u2019", "'").split())


def _time(match: re.Match[str]) -> str:
    """A time as 24-hour HH:MM."""
    if match.group(3):
        hour, minute = int(match.group(1)) % 12, int(match.group(2) or 0)
        if match.group(3).lower() == "p":
            hour += 12
    else:
        hour, minute = int(match.group(4)), int(match.group(5))
    return f"{hour:02d}:{minute:02d}"


def _month_day(match: re.Match[str]) -> str:
    month_name = (match.group(1) or match.group(4)).lower()[:3]
    day = int(match.group(2) or match.group(3))
    month = next(i for i, m in enumerate(_MONTHS, 1) if m.startswith(month_name))
    return f"{month:02d}-{day:02d}"


def _number(text: str) -> str:
    return text.strip("$€£% ").replace(",", "")


class Facts:
    """What a body of text holds that details are matched against, found once."""

    def __init__(self, texts: Iterable[str]) -> None:
        joined = "\n".join(texts)
        self.folded = fold(joined)
        self.bodies = fold(" ".join(_HEAD.sub("", line) for line in joined.splitlines()))
        self.words = frozenset(_WORD.findall(self.folded))
        self.times = frozenset(_time(m) for m in _TIME.finditer(joined))
        self.dates = frozenset(
            [f"{m.group(2)}-{m.group(3)}" for m in _ISO_DATE.finditer(joined)]
            + [_month_day(m) for m in _MONTH_DAY.finditer(joined)]
        )
        self.numbers = frozenset(_number(m.group(0)) for m in _NUMBER.finditer(joined))

    def holds(self, kind: str, value: str) -> bool:
        match kind:
            case "time":
                return value in self.times
            case "date":
                return value in self.dates
            case "number":
                return value in self.numbers
            case "word":
                return value in self.words
            case _:  # a phrase: a link or a quote, maybe over two messages
                return value in self.folded or value in self.bodies


def stated_details(reply: str, names: Iterable[str] = ()) -> list[tuple[str, str, str]]:
    """(text as written, kind of match, value to match) of every detail `reply` states."""
    found: list[tuple[str, str, str]] = []
    taken: list[tuple[int, int]] = []

    def take(match: re.Match[str], kind: str, value: str) -> None:
        span = match.span()
        if any(span[0] < end and start < span[1] for start, end in taken):
            return
        taken.append(span)
        found.append((match.group(0).strip(), kind, value))

    for m in _URL.finditer(reply):
        take(m, "phrase", fold(m.group(0).rstrip(".,;:!?")))
    for m in _QUOTE.finditer(reply):
        take(m, "phrase", fold(m.group(1)))
    for m in _ISO_DATE.finditer(reply):
        take(m, "date", f"{m.group(2)}-{m.group(3)}")
    for m in _MONTH_DAY.finditer(reply):
        take(m, "date", _month_day(m))
    for m in _TIME.finditer(reply):
        take(m, "time", _time(m))
    for m in _NUMBER.finditer(reply):
        take(m, "number", _number(m.group(0)))
    known = {fold(name) for name in names for name in name.split()}
    openers = {m.start(1) for m in _SENTENCE_START.finditer(reply)}
    for m in _WORD.finditer(reply):
        word = m.group(0)
        folded = fold(word).removesuffix("'s")
        if folded in NOT_NAMES or folded in _CALENDAR_WORDS:
            continue
        if folded in known or (word[0].isupper() and m.start() not in openers):
            take(m, "word", folded)
    return found


_SPEAKER = re.compile(r"\[\d+\]\s+\S+\s+\S+\s+([^:\n]{1,80}):|(?:\||/ )\s*([^:|/\n]{1,40}):")


def speakers(texts: Iterable[str]) -> set[str]:
    """The names of the people whose words `texts` show (message heads, row lines)."""
    return {
        (m.group(1) or m.group(2)).strip() for text in texts for m in _SPEAKER.finditer(text)
    }


def ground(
    reply: str, read: Sequence[str], summary: Sequence[str], names: Iterable[str] = ()
) -> Grounding:
    """Each detail of `reply`: `read` if found in what was read word for word, `summary`
    if only in the summary lines seen, else `unsupported`. The people of the channel
    (`names`, and whoever speaks in the texts) are names wherever they stand."""
    word_for_word, summarised = Facts(read), Facts(summary)
    known = {*names, *speakers(read), *speakers(summary)}
    details: list[Detail] = []
    seen: set[tuple[str, str]] = set()
    for text, kind, value in stated_details(reply, known):
        if (kind, value) in seen:
            continue
        seen.add((kind, value))
        where: DetailKind = (
            "read" if word_for_word.holds(kind, value)
            else "summary" if summarised.holds(kind, value)
            else "unsupported"
        )
        details.append(Detail(text=text, kind=where))
    return Grounding(
        details=tuple(details),
        read=sum(d.kind == "read" for d in details),
        summary=sum(d.kind == "summary" for d in details),
        unsupported=sum(d.kind == "unsupported" for d in details),
    )
