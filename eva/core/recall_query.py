# A recall question read for searching: its content words and the times it names.
#
# Pure: text, the channel's time zone and the time of asking in, a
# `RecallQuery` out. People ask in sentences ("what did Maya say about the
# ferry in June?"); the words that only frame a question ("what", "did",
# "say", "about") match thousands of messages and are dropped, unless
# nothing else is left. Months, dates and years, and a few spans relative to
# the time of asking ("yesterday", "last week"), become time spans the
# search keeps to; their words are then no longer searched for.
# Invariants: `words` are index terms (eva.core.terms) in the question's
# order, each once; every span is a half-open [start, stop) in UTC
# milliseconds with start < stop.
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta, tzinfo
from typing import Final

from eva.core.terms import term_bytes

_FRAME_WORDS: Final = """
a about above after again all am an and any anyone anything are around as ask asked at
be been before being both but by can could did do does doing done during each else ever
every everyone for from get got had has have having he her here hers him his how i if in
into is it its just know like me mention mentioned mine more most my no nor not of off on
once one only or other our ours out over own recall remember said same say saying says she
should so some someone something talk talked tell than that the their them then there
these they thing things think this those through to too up us very was we were what when
where which while who whom whose why will with would you your yours
s t d ll m re ve aren couldn didn doesn don hadn hasn haven isn shouldn wasn weren won wouldn
"""
FRAME_WORDS: Final = frozenset(word.encode() for word in _FRAME_WORDS.split())
"""Words that frame a question rather than say what it is about (with what is left of
"what's", "didn't" and the like once split at the apostrophe)."""

_MONTHS: Final = {
    name: number
    for number, names in enumerate(
        (
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ),
        start=1,
    )
    for name in names
}
# "early", "mid" and "late" in a month: its days 1-10, 11-20 and 21-end.
_PARTS: Final = {
    "early": (1, 10),
    "beginning": (1, 10),
    "start": (1, 10),
    "mid": (11, 20),
    "middle": (11, 20),
    "late": (21, 31),
    "end": (21, 31),
}
_ISO_DATE: Final = re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")
_YEAR: Final = re.compile(r"^(19|20)\d\d$")
_DAY: Final = re.compile(r"^(\d{1,2})(st|nd|rd|th)?$")
_RELATIVE: Final = {"yesterday": 1, "today": 0}
_LAST: Final = {"week": 7, "month": 31, "year": 366}


@dataclass(frozen=True, slots=True)
class RecallQuery:
    """What recall searches for: content words, and the time spans to keep to (none: any time)."""

    text: str
    words: tuple[bytes, ...]
    spans: tuple[tuple[int, int], ...] = ()


def read_query(text: str, tz: tzinfo, now_ms: int, first_ms: int, last_ms: int) -> RecallQuery:
    """The question `text` read for search, asked at `now_ms` in a channel whose
    messages run from `first_ms` to `last_ms` (a month named without its year
    means that month in every year of the channel)."""
    words = list(dict.fromkeys(term_bytes(text)))
    spans, time_words = _spans(text, words, tz, now_ms, first_ms, last_ms)
    words = [_bare_number(word) for word in words]
    content = [word for word in words if word not in FRAME_WORDS and word not in time_words]
    if not content:  # a question of frame words alone is searched as it is
        content = [word for word in words if word not in time_words] or words
    return RecallQuery(text=text, words=tuple(content), spans=spans)


def _bare_number(word: bytes) -> bytes:
    """An ordinal as the number chats write beside a month ("14th" as "14")."""
    day = _DAY.match(word.decode())
    return day.group(1).encode() if day is not None and day.group(2) else word


def _spans(
    text: str, words: list[bytes], tz: tzinfo, now_ms: int, first_ms: int, last_ms: int
) -> tuple[tuple[tuple[int, int], ...], set[bytes]]:
    """The time spans the question names, and the words that named them."""
    used: set[bytes] = set()
    days: list[tuple[date, date]] = []  # [first, last] days, inclusive
    for match in _ISO_DATE.finditer(text):
        found = _date(*map(int, match.groups()))
        if found is not None:
            days.append((found, found))
            used.update(term_bytes(match.group()))
    today = _day_of(now_ms, tz)
    for name, back in _RELATIVE.items():
        if name.encode() in words:
            used.add(name.encode())
            days.append((today - timedelta(days=back), today - timedelta(days=back)))
    for place, word in enumerate(words[:-1]):
        span = _LAST.get(words[place + 1].decode())
        if word in (b"last", b"past") and span is not None:
            used.update((word, words[place + 1]))
            days.append((today - timedelta(days=span), today))
    if not days:
        days, used = _month_days(words, tz, first_ms, last_ms)
    spans = sorted(
        {(_start_ms(first, tz), _start_ms(last + timedelta(days=1), tz)) for first, last in days}
    )
    return tuple(spans), used


def _month_days(
    words: list[bytes], tz: tzinfo, first_ms: int, last_ms: int
) -> tuple[list[tuple[date, date]], set[bytes]]:
    """Spans named by month (with a day, a part of the month or a year) or by year alone."""
    text_words = [word.decode() for word in words]
    years = [int(word) for word in text_words if _YEAR.match(word)]
    used = {str(year).encode() for year in years}
    named: list[tuple[int, int, int]] = []  # (month, first day, last day)
    for place, word in enumerate(text_words):
        month = _MONTHS.get(word)
        # "may", "mar" and the like are months only next to a day, part or year
        if month is None or (len(word) <= 3 and not _beside_time(text_words, place)):
            continue
        first_day, last_day = _days_named(text_words, place)
        named.append((month, first_day, last_day))
        used.add(word.encode())
        for near in (place - 2, place - 1, place + 1, place + 2):
            if 0 <= near < len(text_words) and (
                _DAY.match(text_words[near]) or text_words[near] in _PARTS
            ):
                used.add(text_words[near].encode())
    first_year, last_year = _day_of(first_ms, tz).year, _day_of(last_ms, tz).year
    in_years = years or list(range(first_year, last_year + 1))
    days: list[tuple[date, date]] = []
    for month, first_day, last_day in named:
        for year in in_years:
            start = _date(year, month, first_day)
            end = _date(year, month, min(last_day, _month_length(year, month)))
            if start is not None and end is not None:
                days.append((start, end))
    if not named:
        days = [(date(year, 1, 1), date(year, 12, 31)) for year in years]
    return days, used


def _beside_time(words: list[str], place: int) -> bool:
    """Whether a short month name stands next to a day number, a part of a month or a year."""
    near = words[max(place - 2, 0) : place] + words[place + 1 : place + 3]
    return any(_DAY.match(word) or word in _PARTS or _YEAR.match(word) for word in near)


def _days_named(words: list[str], place: int) -> tuple[int, int]:
    """The days of the month at `words[place]` that its neighbours name (all of it by default)."""
    for near in (place + 1, place - 1, place - 2):  # "june 14", "14 june", "14th of june"
        if 0 <= near < len(words):
            day = _DAY.match(words[near])
            if day is not None and 1 <= int(day.group(1)) <= 31:
                return int(day.group(1)), int(day.group(1))
    for near in (place - 1, place - 2):  # "early june", "in mid june"
        if 0 <= near < len(words) and words[near] in _PARTS:
            return _PARTS[words[near]]
    return 1, 31


def _date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _month_length(year: int, month: int) -> int:
    following = date(year + month // 12, month % 12 + 1, 1)
    return (following - timedelta(days=1)).day


def _day_of(at_ms: int, tz: tzinfo) -> date:
    return datetime.fromtimestamp(at_ms / 1000, tz).date()


def _start_ms(day: date, tz: tzinfo) -> int:
    return int(datetime(day.year, day.month, day.day, tzinfo=tz).timestamp() * 1000)


def index_ranges(
    spans: tuple[tuple[int, int], ...], time_at: Callable[[int], int], messages: int
) -> list[tuple[int, int]]:
    """The [start, stop) message indexes posted within `spans`, the messages being in
    time order (`time_at(index)` gives a message's time)."""

    def first_at(moment: int) -> int:  # the first index posted at `moment` or later
        low, high = 0, messages
        while low < high:
            middle = (low + high) // 2
            if time_at(middle) < moment:
                low = middle + 1
            else:
                high = middle
        return low

    ranges = [(first_at(start), first_at(stop)) for start, stop in spans]
    return [(start, stop) for start, stop in ranges if start < stop]
