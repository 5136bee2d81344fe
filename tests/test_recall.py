from __future__ import annotations

import math
import random
import re
import unicodedata
from collections.abc import Callable

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eva.core import recall as recall_module
from eva.core import recall_search
from eva.core.block import ShownMessage
from eva.core.keys import StreamId, stream_prefix
from eva.core.memtables import MemoryTables
from eva.core.recall import RecallView, recall_text, recall_view
from eva.core.recall_index import BUCKET_SIZE, PostingBuffer, StreamTexts
from eva.core.recall_search import SearchResult, search
from eva.core.render import utf8_size
from eva.core.stems import related, stem, stem_roots
from eva.core.terms import terms

STREAM = StreamId(7, 9)
OTHER = StreamId(7, 10)
DAY_MS = 86_400_000


def index_all(texts: dict[int, str], stream: StreamId = STREAM) -> MemoryTables:
    tables = MemoryTables()
    buffer = PostingBuffer()
    for index, text in texts.items():
        buffer.add(stream, index, text)
    buffer.flush(tables)
    return tables


def postings(tables: MemoryTables) -> dict[bytes, bytes]:
    return tables.data["postings"]


def found(tables: MemoryTables, query: str, limit: int = 10) -> list[int]:
    return [index for index, _ in search(tables, STREAM, query, limit).hits]


# -- terms -------------------------------------------------------------------


def test_terms_fold_case_and_accents() -> None:
    assert terms("Café CAFE cafe naïve Ångström") == [
        "cafe", "cafe", "cafe", "naive", "angstrom"
    ]  # fmt: skip
    assert terms("STRASSE Straße") == ["strasse", "strasse"]


def test_terms_split_on_anything_but_letters_and_digits() -> None:
    assert terms("https://example.com/a_b-c?x=1") == [
        "https",
        "example",
        "com",
        "a",
        "b",
        "c",
        "x",
        "1",
    ]
    assert terms("hello, world!! 🎉 42") == ["hello", "world", "42"]
    assert terms("") == []


def test_terms_drop_overlong_words() -> None:
    assert terms("short " + "x" * 41 + " tail") == ["short", "tail"]
    assert terms("é" + "x" * 45 + " ok") == ["ok"]
    assert terms("y" * 40) == ["y" * 40]
    assert terms("ß" * 21) == []  # folds to 42 characters


def test_terms_cut_cjk_into_characters() -> None:
    assert terms("東京タワー") == ["東", "京", "タ", "ワ", "ー"]
    assert terms("我爱 Python") == ["我", "爱", "python"]
    assert terms("한국어 단어") == ["한국어", "단어"]


_CJK = (
    "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f\U00030000-\U0003134f"
)
_PLAIN_WORD = re.compile(f"[^\\W_{_CJK}]+|[{_CJK}]")


def plain_terms(text: str) -> list[str]:
    """What a term is, said plainly: the fast paths of `terms` must agree with it."""
    folded = unicodedata.normalize("NFKD", text.casefold())
    folded = "".join(c for c in folded if unicodedata.category(c) != "Mn")
    words = _PLAIN_WORD.findall(unicodedata.normalize("NFC", folded))
    return [word for word in words if len(word) <= 40]


_MIXED = st.text(
    st.one_of(
        st.characters(max_codepoint=0x7F),
        st.sampled_from("éÉßℂ℃ﬁⅫŉ\u2019\u201c😀👴🏼東京タ한국\u0301\u0308\u1100\u1161\u20dd\u0bbe\u0bc6_"),
        st.characters(),
    ),
    max_size=80,
)


@settings(max_examples=500, deadline=None)
@given(text=_MIXED)
def test_terms_agree_with_their_plain_definition(text: str) -> None:
    assert terms(text) == plain_terms(text)
    assert terms("x" * 41 + " " + text) == plain_terms(text)


# -- search ------------------------------------------------------------------


def test_finds_a_message_by_its_rare_words() -> None:
    texts = {i: f"ordinary chatter number {i}" for i in range(50)}
    texts[17] = "the komodo atomic swap finally worked"
    tables = index_all(texts)
    result = search(tables, STREAM, "atomic swap", 5)
    assert result.hits[0][0] == 17
    assert result.total == 1
    assert found(tables, "nothing like this") == []
    assert search(tables, OTHER, "atomic", 5) == SearchResult([], 0)


def test_query_matches_across_case_and_accents() -> None:
    tables = index_all({0: "Meet at the Café", 1: "the CAFE is closed", 2: "tea house"})
    assert sorted(found(tables, "cafe")) == [0, 1]
    assert sorted(found(tables, "CAFÉ")) == [0, 1]


def test_all_query_words_rank_above_one() -> None:
    texts = {
        0: "the deploy failed again today",
        1: "deploy script is in the repo",
        2: "what failed this morning",
        3: "the failed deploy broke the build",
        4: "unrelated words about lunch",
        5: "deploy deploy deploy deploy",
    }
    tables = index_all(texts)
    ranked = found(tables, "failed deploy")
    assert set(ranked[:2]) == {0, 3}
    assert set(ranked) == {0, 1, 2, 3, 5}
    assert search(tables, STREAM, "failed deploy", 10).total == 5


def test_ties_put_the_newer_message_first() -> None:
    tables = index_all({0: "same words", 1: "same words", 2: "same words"})
    assert found(tables, "same") == [2, 1, 0]


def test_limit_bounds_hits_but_not_total() -> None:
    tables = index_all({i: f"common word {i}" for i in range(30)})
    result = search(tables, STREAM, "common", 4)
    assert len(result.hits) == 4
    assert result.total == 30


def test_very_common_terms_still_count_in_total() -> None:
    texts = {i: "the chat goes on" for i in range(2500)}
    texts[100] = "the zebra"
    texts[2600] = "zebra alone"
    tables = index_all(texts)
    result = search(tables, STREAM, "the zebra", 1)
    assert result.hits[0][0] == 100
    assert result.total == 2501  # 2500 with "the", plus "zebra alone"


def plain_bm25(texts: dict[int, str], query: str, limit: int) -> SearchResult:
    """BM25 written out message by message, as the search is defined: k1 1.2, b
    `recall_search.B`, a query word matching every word of its family (its stem, or
    one with a derivational suffix more or less: eva.core.stems.related)."""
    words = {index: terms(text) for index, text in texts.items() if terms(text)}
    documents = len(words)
    length = sum(len(found) for found in words.values())
    scores: dict[int, float] = {}
    query_words = list({stem(t.encode()): t for t in reversed(terms(query))}.values())[::-1]

    def count(word: str, found: list[str]) -> int:
        wanted, roots = stem(word.encode()), stem_roots(word.encode())
        return sum(related(t.encode(), wanted, roots) for t in found)

    df = {word: sum(count(word, found) > 0 for found in words.values()) for word in query_words}
    b = recall_search.B
    for word in sorted((w for w in query_words if df[w]), key=lambda w: (df[w], w.encode())):
        weight = math.log(1 + (documents - df[word] + 0.5) / (df[word] + 0.5)) * 2.2
        for index, found in words.items():
            tf = count(word, found)
            if tf:
                norm = tf + 1.2 * (1 - b) + 1.2 * b * documents / length * len(found)
                scores[index] = scores.get(index, 0.0) + weight * tf / norm
    best = sorted(scores.items(), key=lambda item: (item[1], item[0]), reverse=True)
    return SearchResult(best[:limit], len(scores))


_WORDS = st.sampled_from(
    ["boat", "boats", "marigold", "noon", "lunch", "the", "a", "sail", "sailing", "Boat",
     "sailor", "snore", "snorer"]
)


@settings(max_examples=300, deadline=None)
@given(
    texts=st.dictionaries(
        st.integers(0, 3 * BUCKET_SIZE), st.lists(_WORDS, max_size=12).map(" ".join), max_size=40
    ),
    query=st.lists(_WORDS, min_size=1, max_size=4).map(" ".join),
    limit=st.integers(1, 12),
    open_from=st.integers(0, 3 * BUCKET_SIZE + 1),
    dense_messages=st.sampled_from([recall_search.DENSE_MESSAGES, 0]),
)
def test_search_scores_as_plain_bm25(
    texts: dict[int, str], query: str, limit: int, open_from: int, dense_messages: int
) -> None:
    # Messages from `open_from` on are not indexed yet; they count all the same. With
    # `dense_messages` 0, scores are summed as for a channel of millions of messages.
    tables = index_all({i: t for i, t in texts.items() if i < open_from})
    unindexed = sorted((i, t) for i, t in texts.items() if i >= open_from)
    dense = recall_search.DENSE_MESSAGES
    recall_search.DENSE_MESSAGES = dense_messages
    try:
        found = search(tables, STREAM, query, limit, unindexed)
    finally:
        recall_search.DENSE_MESSAGES = dense
    assert found == plain_bm25(texts, query, limit)


def test_postings_across_buckets() -> None:
    indexes = [0, BUCKET_SIZE - 1, BUCKET_SIZE, 3 * BUCKET_SIZE + 5]
    tables = index_all({index: "bucketed word" for index in indexes})
    assert sorted(found(tables, "bucketed")) == indexes


def test_term_frequency_is_capped_not_broken() -> None:
    tables = index_all({0: "spam " * 300, 1: "spam eggs"})
    assert found(tables, "spam") == [0, 1]


# -- removal and canonical bytes -------------------------------------------


def test_removing_a_message_leaves_no_trace_of_its_words() -> None:
    texts = {0: "hello world", 1: "my secret is zanzibarquux forever", 2: "world peace"}
    tables = index_all(texts)
    assert any(b"zanzibarquux" in key for key in postings(tables))
    buffer = PostingBuffer()
    buffer.remove(STREAM, 1, texts[1])
    buffer.flush(tables)
    for key, value in postings(tables).items():
        assert b"zanzibarquux" not in key
        assert b"zanzibarquux" not in value
        assert b"secret" not in key
    assert found(tables, "zanzibarquux") == []
    assert postings(tables) == postings(index_all({0: texts[0], 2: texts[2]}))


def test_removing_every_message_empties_the_table() -> None:
    texts = {0: "one two", 5000: "two three"}
    tables = index_all(texts)
    buffer = PostingBuffer()
    for index, text in texts.items():
        buffer.remove(STREAM, index, text)
    buffer.flush(tables)
    assert postings(tables) == {}


def test_an_edit_in_one_buffer_equals_indexing_the_new_text() -> None:
    tables = index_all({0: "first draft text", 1: "other"})
    buffer = PostingBuffer()
    buffer.remove(STREAM, 0, "first draft text")
    buffer.add(STREAM, 0, "final text text")
    buffer.flush(tables)
    assert postings(tables) == postings(index_all({0: "final text text", 1: "other"}))


def test_add_then_remove_in_one_buffer_keeps_nothing() -> None:
    tables = index_all({0: "kept"})
    buffer = PostingBuffer()
    buffer.add(STREAM, 1, "fleeting words")
    buffer.remove(STREAM, 1, "fleeting words")
    buffer.add(STREAM, 2, "later words")
    buffer.flush(tables)
    assert postings(tables) == postings(index_all({0: "kept", 2: "later words"}))


def test_batches_and_order_do_not_change_the_bytes() -> None:
    rng = random.Random(5)
    vocabulary = ["alpha", "beta", "gamma", "delta", "Émile", "東京", "x1", "zz"]
    texts = {
        rng.randrange(3 * BUCKET_SIZE): " ".join(rng.choices(vocabulary, k=rng.randint(1, 6)))
        for _ in range(300)
    }
    at_once = index_all(texts)
    items = list(texts.items())
    rng.shuffle(items)
    tables = MemoryTables()
    for start in range(0, len(items), 37):
        buffer = PostingBuffer()
        for index, text in items[start : start + 37]:
            buffer.add(STREAM, index, text)
        buffer.flush(tables)
    assert postings(tables) == postings(at_once)


def test_a_buffer_sent_as_its_changes_writes_the_same_bytes() -> None:
    tables = index_all({0: "alpha beta", 1: "kept", BUCKET_SIZE: "beta gamma"})
    twin = MemoryTables()
    twin.data = {table: dict(rows) for table, rows in tables.data.items()}
    buffer = PostingBuffer()
    buffer.remove(STREAM, 0, "alpha beta")
    buffer.add(STREAM, 0, "beta beta")
    buffer.add(STREAM, 2, "fresh words")
    buffer.remove(STREAM, BUCKET_SIZE, "beta gamma")
    buffer.add(OTHER, 1, "other stream")
    sent = msgspec.msgpack.encode(buffer.changes())
    received = PostingBuffer.of_changes(msgspec.msgpack.decode(sent, type=list[StreamTexts]))
    buffer.flush(tables)
    received.flush(twin)
    assert postings(twin) == postings(tables)
    expected = index_all({0: "beta beta", 1: "kept", 2: "fresh words"})
    both = PostingBuffer()
    both.add(OTHER, 1, "other stream")
    both.flush(expected)
    assert postings(tables) == postings(expected)


def test_streams_do_not_mix() -> None:
    tables = MemoryTables()
    buffer = PostingBuffer()
    buffer.add(STREAM, 0, "shared word")
    buffer.add(OTHER, 0, "shared other")
    buffer.flush(tables)
    assert search(tables, OTHER, "word", 5).total == 0
    assert all(
        key.startswith((stream_prefix(STREAM), stream_prefix(OTHER))) for key in postings(tables)
    )


_WORDS = st.sampled_from(["red", "green", "blue", "Café", "cafe", "ß", "東", "n1", "z"])
_TEXTS = st.lists(_WORDS, max_size=6).map(" ".join)
_INDEXES = st.sampled_from([0, 1, 2, 3, BUCKET_SIZE - 1, BUCKET_SIZE, BUCKET_SIZE + 1, 9000])


@settings(max_examples=150, deadline=None)
@given(
    operations=st.lists(st.tuples(st.booleans(), _INDEXES, _TEXTS), max_size=30),
    cuts=st.lists(st.integers(0, 30), max_size=6),
)
def test_incremental_index_equals_index_built_at_once(
    operations: list[tuple[bool, int, str]], cuts: list[int]
) -> None:
    tables = MemoryTables()
    live: dict[int, str] = {}
    buffer = PostingBuffer()
    for step, (adding, index, text) in enumerate(operations):
        if step in cuts:
            buffer.flush(tables)
            buffer = PostingBuffer()
        if index in live:
            # An edit (remove + add) or a deletion of what was indexed.
            buffer.remove(STREAM, index, live.pop(index))
            if adding:
                buffer.add(STREAM, index, text)
                live[index] = text
        elif adding:
            buffer.add(STREAM, index, text)
            live[index] = text
    buffer.flush(tables)
    assert postings(tables) == postings(index_all(live))


@settings(max_examples=40, deadline=None)
@given(
    texts=st.lists(st.sampled_from(["alpha beta", "beta", "gamma alpha alpha", "delta", "!"]),
                   min_size=1, max_size=150),
    indexed=st.integers(0, 150),
    query=st.sampled_from(["alpha", "beta gamma", "delta alpha", "zeta"]),
)
def test_unindexed_messages_are_searched_as_if_indexed(
    texts: list[str], indexed: int, query: str
) -> None:
    every = dict(enumerate(texts))
    cut = min(indexed, len(texts))
    partial = index_all({i: t for i, t in every.items() if i < cut})
    rest = [(i, t) for i, t in every.items() if i >= cut]
    assert search(partial, STREAM, query, 5, rest) == search(index_all(every), STREAM, query, 5)


# -- the tool's text ----------------------------------------------------------


def chat(
    texts: list[str],
    deleted: frozenset[int] = frozenset(),
    *,
    minutes: list[int] | None = None,
    replies: dict[int, int] | None = None,
) -> Callable[[int], ShownMessage | None]:
    """Messages a minute apart (or at `minutes`), message i with Discord id 1000 + i,
    `replies` saying which message replies to which."""

    def message_at(index: int) -> ShownMessage | None:
        if not 0 <= index < len(texts):
            return None
        parent = (replies or {}).get(index)
        return ShownMessage(
            index=index,
            at_ms=DAY_MS * 19000 + (minutes[index] if minutes else index) * 60_000,
            author_name=f"user{index % 3}",
            content=texts[index],
            deleted=index in deleted,
            message_id=1000 + index,
            reply_to=None if parent is None else 1000 + parent,
        )

    return message_at


def shown_indexes(view: RecallView) -> list[list[int]]:
    return [[message.index for message in window] for window in view.windows]


def test_context_stops_at_a_long_pause() -> None:
    texts = [f"line {i}" for i in range(8)]
    # 3 and 4 are a turn of talk; 2 came hours before, 5 hours after
    minutes = [0, 1, 2, 400, 401, 900, 901, 902]
    view = recall_view("line", SearchResult([(3, 1.0)], 1), chat(texts, minutes=minutes))
    assert shown_indexes(view) == [[3, 4]]


def test_a_hit_is_shown_with_the_message_it_replies_to() -> None:
    texts = [f"line {i}" for i in range(40)]
    replies = {20: 2, 24: 20, 30: 31}  # 20 answers 2; 24 answers 20; 30 names a later one
    found = SearchResult([(20, 2.0), (30, 1.0)], 2)
    view = recall_view(
        "line", found, chat(texts, replies=replies), index_of=lambda message_id: message_id - 1000
    )
    assert shown_indexes(view) == [[2, 19, 20, 21], [29, 30, 31]]
    # without a way to find a message by its id, the turn around the hit alone
    alone = recall_view("line", found, chat(texts, replies=replies))
    assert shown_indexes(alone) == [[19, 20, 21], [29, 30, 31]]


def test_a_hit_too_big_for_what_is_left_gives_way_to_smaller_ones() -> None:
    texts = ["short needle"] * 10 + ["needle " + "hay " * 70] * 3
    result = SearchResult([(0, 3.0), (11, 2.0), (5, 1.0)], 3)
    view = recall_view("needle", result, chat(texts), cap_bytes=700)
    hits = [m.index for window in view.windows for m in window if m.hit]
    assert hits == [0, 5]
    assert view.more == 1


def test_recall_text_shows_hits_with_context() -> None:
    texts = [f"filler {i}" for i in range(20)]
    texts[10] = "the key\nis under the mat"
    result = SearchResult([(10, 3.0)], 1)
    text = recall_text("key", result, chat(texts), context=2)
    lines = text.splitlines()
    assert lines[0].startswith('1 messages match "key"')
    assert lines[2] == "2022-01-08"  # the day, then its messages
    window = lines[3:]
    assert [line[:6] for line in window] == ["  [8] ", "  [9] ", "> [10]", "  [11]", "  [12]"]
    assert window[2] == "> [10] 00:10 user1: the key is under the mat"


def test_overlapping_windows_merge_in_rank_order() -> None:
    texts = [f"line {i}" for i in range(40)]
    result = SearchResult([(30, 5.0), (5, 4.0), (7, 3.0), (33, 2.0)], 4)
    view = recall_view("line", result, chat(texts), context=2)
    assert [[m.index for m in window] for window in view.windows] == [
        [28, 29, 30, 31, 32, 33, 34, 35],
        [3, 4, 5, 6, 7, 8, 9],
    ]
    hits = [m.index for window in view.windows for m in window if m.hit]
    assert hits == [30, 33, 5, 7]
    assert view.more == 0


def test_deleted_messages_are_never_shown() -> None:
    texts = [f"line {i}" for i in range(10)]
    gone = frozenset({3, 5, 6})
    result = SearchResult([(4, 2.0), (5, 1.0)], 2)
    text = recall_text("line", result, chat(texts, gone), context=2)
    for index in gone:
        assert f"[{index}]" not in text
    view = recall_view("line", result, chat(texts, gone), context=2)
    assert [m.index for m in view.windows[0]] == [1, 2, 4, 7, 8]


def test_output_stays_within_its_cap_and_counts_the_rest() -> None:
    texts = [f"needle {'hay ' * 200}{i}" for i in range(200)]
    result = SearchResult([(i, 1.0) for i in range(0, 200, 10)], 57)
    text = recall_text("needle", result, chat(texts), cap_bytes=4000)
    assert utf8_size(text) <= 4000
    shown = text.count("\n> ")
    assert 0 < shown < 20
    assert text.splitlines()[-1] == f"... {57 - shown} more hits; refine the words"
    assert "…" in text  # long messages are shortened


def test_no_hits_is_one_clear_line() -> None:
    text = recall_text("zebra", SearchResult([], 0), chat([]))
    assert text == 'No messages match "zebra".'


def test_json_view_names_each_message_by_index() -> None:
    texts = ["a", "b hit", "c"]
    view = recall_view("hit", SearchResult([(1, 1.0)], 1), chat(texts))
    decoded = msgspec.json.decode(msgspec.json.encode(view))
    messages = decoded["windows"][0]
    assert [m["index"] for m in messages] == [0, 1, 2]
    assert [m["hit"] for m in messages] == [False, True, False]


@pytest.mark.parametrize("context", [0, 1, 3])
def test_context_size(context: int) -> None:
    texts = [f"m {i}" for i in range(20)]
    view = recall_view("m", SearchResult([(10, 1.0)], 1), chat(texts), context=context)
    assert [m.index for m in view.windows[0]] == list(range(10 - context, 11 + context))


def test_search_feeds_recall_end_to_end() -> None:
    texts = ["hello there", "we talked about the zanzibar trip", "nice", "ok", "bye"]
    tables = index_all(dict(enumerate(texts)))
    result = search(tables, STREAM, "Zanzibar", 5)
    text = recall_text("Zanzibar", result, chat(texts))
    assert "> [1]" in text
    assert "  [0]" in text
    assert "  [2]" in text
    assert "[3]" not in text  # one message of context on each side


@given(
    query=st.text(max_size=20),
    texts=st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=5),
    hits=st.integers(0, 50),
    more=st.integers(0, 50),
)
def test_the_size_of_an_answer_is_worked_out_as_its_text_would_be(
    query: str, texts: list[str], hits: int, more: int
) -> None:
    sizes = [utf8_size(text) for text in texts]
    made = recall_module._render(query, texts, hits, hits + more, more)
    assert recall_module._rendered_size(query, sizes, hits, hits + more) == utf8_size(made)
