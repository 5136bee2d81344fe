"""The recall index's postings of new messages, gathered bucket by bucket."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from eva.core.recall_index import BUCKET_SIZE, gather
from eva.core.terms import MAX_TERM_CHARS, term_bytes

_RECORD = struct.Struct("<HHB")


def test_records_hold_offset_length_and_capped_frequency() -> None:
    long_text = " ".join(["w"] * 300 + ["Once", "TWICE", "twice"] + ["filler"] * 70_000)
    index = 3 * BUCKET_SIZE + 17
    [(bucket, postings, docs, length)] = gather([(index, long_text)])
    assert (bucket, docs, length) == (3, 1, 0xFFFF)
    assert _RECORD.unpack(postings[b"w"]) == (17, 0xFFFF, 255)
    assert _RECORD.unpack(postings[b"twice"]) == (17, 0xFFFF, 2)
    assert _RECORD.unpack(postings[b"once"]) == (17, 0xFFFF, 1)
    assert list(postings) == [b"w", b"once", b"twice", b"filler"]


def test_messages_without_terms_and_overlong_words_are_left_out() -> None:
    pairs = [(0, "!!! ..."), (1, "z" * (MAX_TERM_CHARS + 1)), (2, ""), (3, "🙂")]
    assert gather(pairs) == []


def test_each_bucket_holds_its_own_messages_in_offset_order() -> None:
    pairs = [(5, "apple pie"), (9, "apple"), (BUCKET_SIZE + 2, "pie")]
    [(first, postings, docs, length), (second, later, later_docs, later_length)] = gather(pairs)
    assert (first, docs, length) == (0, 2, 3)
    assert [_RECORD.unpack_from(postings[b"apple"], at)[0] for at in (0, 5)] == [5, 9]
    assert (second, later_docs, later_length) == (1, 1, 1)
    assert _RECORD.unpack(later[b"pie"]) == (2, 1, 1)


def _plain_gather(texts: list[tuple[int, str]]) -> dict[int, tuple[dict[bytes, bytes], int, int]]:
    """What `gather` must give, written the plain way: each message's terms counted, its
    record appended to each of its terms' lists."""
    buckets: dict[int, tuple[dict[bytes, bytes], int, int]] = {}
    for index, text in texts:
        words = term_bytes(text)
        if not words:
            continue
        length = min(len(words), 0xFFFF)
        postings, docs, total = buckets.get(index // BUCKET_SIZE, ({}, 0, 0))
        counts: dict[bytes, int] = {}
        for word in words:
            counts[word] = counts.get(word, 0) + 1
        for word, tf in counts.items():
            record = _RECORD.pack(index % BUCKET_SIZE, length, min(tf, 255))
            postings[word] = postings.get(word, b"") + record
        buckets[index // BUCKET_SIZE] = (postings, docs + 1, total + length)
    return buckets


_WORDS = st.sampled_from(
    ["apple", "Apple", "pie", "Ünïcode", "naïve", "日本", "x" * (MAX_TERM_CHARS + 1),
     "λ" * MAX_TERM_CHARS, "λ" * (MAX_TERM_CHARS + 1), "42", "a_b", "\x00", "—", "🙂",
     "straße", "ﬁne", "℃"]
)


@given(
    st.lists(
        st.tuples(
            st.integers(0, 3 * BUCKET_SIZE),
            st.lists(_WORDS, max_size=8).map(" ".join) | st.text(max_size=30),
        ),
        max_size=40,
        unique_by=lambda pair: pair[0],
    )
)
@settings(max_examples=200, deadline=None)
def test_gather_gives_what_the_plain_loop_gives(texts: list[tuple[int, str]]) -> None:
    texts.sort()
    gathered = gather(texts)
    assert [number for number, *_ in gathered] == sorted(_plain_gather(texts))
    for number, postings, docs, length in gathered:
        expected, expected_docs, expected_length = _plain_gather(texts)[number]
        assert postings == expected and list(postings) == list(expected)
        assert (docs, length) == (expected_docs, expected_length)
