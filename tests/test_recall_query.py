from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

from eva.core.keys import StreamId
from eva.core.memtables import MemoryTables
from eva.core.recall_index import OpenChunk, PostingBuffer
from eva.core.recall_query import index_ranges, read_query
from eva.core.recall_search import people_named, search
from eva.core.stems import forms_prefix, stem
from eva.core.terms import author_words

STREAM = StreamId(1, 2)
BERLIN = ZoneInfo("Europe/Berlin")


def ms(year: int, month: int, day: int, tz: ZoneInfo | None = None) -> int:
    return int(datetime(year, month, day, tzinfo=tz or UTC).timestamp() * 1000)


FIRST, LAST, NOW = ms(2023, 1, 1), ms(2025, 12, 31), ms(2025, 6, 18)


def read(text: str, tz: ZoneInfo | None = None):  # type: ignore[no-untyped-def]
    return read_query(text, tz or UTC, NOW, FIRST, LAST)


def test_frame_words_are_dropped_and_content_kept_in_order() -> None:
    query = read("What did Maya say about the ferry to Bodø?")
    assert query.words == (b"maya", b"ferry", b"bod\xc3\xb8")
    assert query.spans == ()


def test_a_question_of_frame_words_alone_is_searched_as_it_is() -> None:
    assert read("what did we say?").words == (b"what", b"did", b"we", b"say")


def test_ordinals_are_searched_as_the_numbers_chats_write() -> None:
    assert read("which ferry is on the 14th?").words == (b"ferry", b"14")


def test_a_month_and_year_is_a_span_in_the_channel_zone() -> None:
    query = read("what happened with the exchange in March 2024?", BERLIN)
    assert query.words == (b"happened", b"exchange")
    assert query.spans == ((ms(2024, 3, 1, BERLIN), ms(2024, 4, 1, BERLIN)),)


def test_a_month_without_year_means_it_in_every_year_of_the_channel() -> None:
    query = read("what did we plan in early June?")
    assert query.words == (b"plan",)
    assert query.spans == tuple((ms(year, 6, 1), ms(year, 6, 11)) for year in (2023, 2024, 2025))


def test_parts_of_a_month() -> None:
    end = read("what happened at the end of October 2018?")
    assert end.words == (b"happened",)
    assert end.spans == ((ms(2018, 10, 21), ms(2018, 11, 1)),)
    assert read("the start of feb 2024").spans == ((ms(2024, 2, 1), ms(2024, 2, 11)),)
    assert read("mid june 2024").spans == ((ms(2024, 6, 11), ms(2024, 6, 21)),)


def test_a_day_of_a_month_and_iso_dates() -> None:
    assert read("what did we do on June 18 2025").spans == ((ms(2025, 6, 18), ms(2025, 6, 19)),)
    assert read("the 14th of june 2024 trip").spans == ((ms(2024, 6, 14), ms(2024, 6, 15)),)
    assert read("notes from 2024-02-29").spans == ((ms(2024, 2, 29), ms(2024, 3, 1)),)


def test_short_month_names_need_a_day_or_year_beside_them() -> None:
    assert read("may I ask about the mar jar").spans == ()
    assert read("may 3 plans").spans == tuple(
        (ms(year, 5, 3), ms(year, 5, 4)) for year in (2023, 2024, 2025)
    )


def test_a_year_alone_and_spans_relative_to_the_asking() -> None:
    assert read("the fork in 2024").spans == ((ms(2024, 1, 1), ms(2025, 1, 1)),)
    assert read("what did Jonas say yesterday").spans == ((ms(2025, 6, 17), ms(2025, 6, 18)),)
    assert read("games last week").spans == ((ms(2025, 6, 11), ms(2025, 6, 19)),)


def test_index_ranges_find_the_messages_posted_in_each_span() -> None:
    times = [0, 10, 10, 20, 30, 40, 50]
    assert index_ranges(((10, 30), (45, 100)), times.__getitem__, len(times)) == [(1, 4), (6, 7)]
    assert index_ranges(((31, 39),), times.__getitem__, len(times)) == []


def test_forms_share_a_stem_and_a_prefix_to_look_them_up_by() -> None:
    assert stem(b"installing") == stem(b"installed") == stem(b"installs")
    assert stem(b"family") == stem(b"families")
    for word, form in [(b"family", b"families"), (b"moving", b"move"), (b"delays", b"delayed")]:
        assert form.startswith(forms_prefix(word))
    assert stem(b"jl777") == b"jl777"
    assert stem("zoë".encode()) == "zoë".encode()


def index_all(texts: dict[int, str]) -> MemoryTables:
    tables = MemoryTables()
    buffer = PostingBuffer()
    for index, text in sorted(texts.items()):
        buffer.add(STREAM, index, text)
    buffer.flush(tables)
    return tables


def test_a_word_finds_its_other_forms_indexed_and_not_yet_indexed() -> None:
    tables = index_all({0: "I installed it", 1: "installer broke", 2: "still installing", 3: "no"})
    unindexed = [(4, "he installs things"), (5, "instagram")]
    result = search(tables, STREAM, "install", 10, unindexed)
    assert sorted(index for index, _ in result.hits) == [0, 1, 2, 4]  # "installer" too
    assert result.total == 4


def test_within_keeps_to_ranges_but_not_the_statistics() -> None:
    tables = index_all({i: "ferry news" if i % 2 else "ferry" for i in range(20)})
    every = search(tables, STREAM, "ferry news", 20)
    kept = search(tables, STREAM, "ferry news", 20, within=[(4, 8), (15, 16)])
    assert [index for index, _ in kept.hits] == [15, 7, 5, 6, 4]
    scores = dict(every.hits)
    assert all(score == scores[index] for index, score in kept.hits)
    assert kept.total == 5


def test_a_word_names_a_person_by_a_word_of_their_name_or_its_start() -> None:
    tables = MemoryTables()
    buffer = PostingBuffer()
    for index, name in enumerate(["jl777c", "Steve Lee", "Jonas", "Zoë", "Jo"]):
        buffer.add(STREAM, index, f"hello {author_words(name)}")
    buffer.flush(tables)

    def named(*words: bytes) -> dict[bytes, list[bytes]]:
        return people_named(tables, STREAM, words)

    assert named(b"jl777") == {b"jl777": [b"0by0jl777c"]}
    assert named(b"steve", b"lee", b"fees") == {b"steve": [b"0by0steve"], b"lee": [b"0by0lee"]}
    assert named(b"zoe") == {b"zoe": [b"0by0zoe"]}
    assert named(b"jo") == {b"jo": [b"0by0jo"]}  # a short word names only a whole name word
    assert named(b"jona") == {b"jona": [b"0by0jonas"]}
    assert named(b"hello") == {}
    chunk = OpenChunk([(9, f"hi {author_words('Maya')}")])
    assert people_named(tables, STREAM, [b"maya"], chunk) == {b"maya": [b"0by0maya"]}


def test_a_named_persons_own_long_messages_rank_with_mentions_of_them() -> None:
    texts = {
        0: f"ann said the ferry leaves at noon {author_words('Bo')}",
        1: f"the ferry leaves at noon from pier four on fridays {author_words('Ann')}",
        2: f"ok {author_words('Ann')}",
        3: f"lunch {author_words('Bo')}",
    }
    tables = index_all(texts)
    marks = people_named(tables, STREAM, [b"ann"])[b"ann"]
    assert marks == [b"0by0ann"]
    plain = search(tables, STREAM, "ann ferry", 10)
    assert [index for index, _ in plain.hits] == [0, 1]
    named = search(tables, STREAM, "ann ferry", 10, authors=marks, author_boost=1.0)
    assert [index for index, _ in named.hits] == [1, 0, 2]
