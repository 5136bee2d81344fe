"""The recall index's postings of new messages, gathered bucket by bucket."""

from __future__ import annotations

import struct

from eva.core.recall_index import BUCKET_SIZE, gather
from eva.core.terms import MAX_TERM_CHARS

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
