"""The recall index's C gathering (eva/core/_postings.c) against the Python loop it replaces."""

from __future__ import annotations

import struct
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eva.core.recall_index import BUCKET_SIZE, gather_python
from eva.core.terms import MAX_TERM_CHARS, term_bytes

_postings = pytest.importorskip(
    "eva.core._postings", reason="this install was built without the C module"
)

_RECORD = struct.Struct("<HHB")

# Texts that reach every path: ASCII words with case and digits, runs over the
# length limit, separators of every kind, accents, scripts without spaces,
# and repeats (term frequency).
_WORDS = st.sampled_from(
    ["the", "The", "THE", "a1", "Z9z", "x" * MAX_TERM_CHARS, "y" * (MAX_TERM_CHARS + 1),
     "café", "naïve", "東京", "\uff46\uff55\uff4c\uff4c", "Straße", "İstanbul", "🙂",
     "_", "a_b", "", "don't"]
)  # fmt: skip
_SEPARATORS = st.sampled_from([" ", "  ", "\n", "\t", ",", "-", "/", ".", "\u00a0", "_"])
_TEXT = st.one_of(
    st.lists(st.tuples(_WORDS, _SEPARATORS), max_size=30).map(
        lambda parts: "".join(word + sep for word, sep in parts)
    ),
    st.text(max_size=60),
    st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=200),
)


def _increasing(gaps: list[int]) -> list[int]:
    index, out = -1, []
    for gap in gaps:
        index += gap
        out.append(index)
    return out


@settings(max_examples=400, deadline=None)
@given(
    texts=st.lists(_TEXT, max_size=40),
    gaps=st.lists(st.sampled_from([1, 1, 1, 2, 7, BUCKET_SIZE - 3, BUCKET_SIZE * 3]), max_size=40),
)
def test_c_gathers_exactly_what_python_gathers(texts: list[str], gaps: list[int]) -> None:
    indexes = _increasing(gaps[: len(texts)] + [1] * max(0, len(texts) - len(gaps)))
    pairs = list(zip(indexes, texts, strict=True))
    native = _postings.gather(pairs, term_bytes)
    assert native == gather_python(pairs)
    # The order of the terms is the order they first occur in, as in Python.
    assert [list(bucket[1]) for bucket in native] == [
        list(bucket[1]) for bucket in gather_python(pairs)
    ]


def test_records_hold_offset_length_and_capped_frequency() -> None:
    long_text = " ".join(["w"] * 300 + ["Once", "TWICE", "twice"] + ["filler"] * 70_000)
    index = 3 * BUCKET_SIZE + 17
    [(bucket, postings, docs, length)] = _postings.gather([(index, long_text)], term_bytes)
    assert (bucket, docs, length) == (3, 1, 0xFFFF)
    assert _RECORD.unpack(postings[b"w"]) == (17, 0xFFFF, 255)
    assert _RECORD.unpack(postings[b"twice"]) == (17, 0xFFFF, 2)
    assert _RECORD.unpack(postings[b"once"]) == (17, 0xFFFF, 1)
    assert list(postings) == [b"w", b"once", b"twice", b"filler"]


def test_messages_without_terms_and_overlong_words_are_left_out() -> None:
    pairs = [(0, "!!! ..."), (1, "z" * (MAX_TERM_CHARS + 1)), (2, ""), (3, "🙂")]
    assert _postings.gather(pairs, term_bytes) == []
    assert gather_python(pairs) == []


def test_bad_input_is_refused_with_a_clear_error() -> None:
    with pytest.raises(ValueError, match="increasing"):
        _postings.gather([(5, "a"), (5, "b")], term_bytes)
    with pytest.raises(ValueError, match="increasing"):
        _postings.gather([(-1, "a")], term_bytes)
    with pytest.raises(TypeError, match=r"\(int, str\)"):
        _postings.gather([(1, b"bytes")], term_bytes)
    with pytest.raises(TypeError, match="pair"):
        _postings.gather([(1, "a", "extra")], term_bytes)
    with pytest.raises(TypeError, match="list of bytes"):
        _postings.gather([(1, "café")], lambda text: [text])
    with pytest.raises(ZeroDivisionError):
        _postings.gather([(1, "café")], lambda text: [1 / 0])
    with pytest.raises(OverflowError):
        _postings.gather([(2**70, "a")], term_bytes)


def test_threads_gathering_at_once_each_get_the_whole_result() -> None:
    """The gathering runs with the interpreter lock released: nothing is shared
    between calls, so threads gathering at once do not disturb each other."""
    pairs = [(index, f"word{index % 97} Other{index % 13} shared") for index in range(40_000)]
    expected = gather_python(pairs)
    results: list[object] = []

    def gather_once() -> None:
        results.append(_postings.gather(pairs, term_bytes))

    threads = [threading.Thread(target=gather_once) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == [expected] * 3
