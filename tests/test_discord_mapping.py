# The pure Discord mapping: payload values to inputs, mentions, shards, reply splitting.
from __future__ import annotations

import unicodedata
from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from eva.core.keys import StreamId
from eva.core.recall import RecallLine
from eva.discord.mapping import (
    OFFLINE_NOTE,
    delete_of,
    display_name,
    edit_of,
    mentions_eva,
    offline_reply,
    post_of,
    readable,
    shard_for,
    split_reply,
    stream_of,
    utf16_units,
    without_mention,
)
from eva.live.inputs import Delete, Edit, Post

EVA = 1_100_000_000_000_000_001
ALICE = 1_100_000_000_000_000_002
WHEN = datetime(2024, 5, 1, 12, 30, 15, 250_000, tzinfo=UTC)


def test_a_created_message_becomes_a_post() -> None:
    post = post_of(
        message_id=77,
        author_id=ALICE,
        author_name="Alice",
        is_bot=False,
        timestamp=WHEN,
        content=f"hi <@{EVA}> and <@!{ALICE}> and <@123>",
        referenced_message_id=70,
        attachment_filenames=["cat.png", "notes.txt"],
        mention_names={EVA: "Eva", ALICE: "Alice"},
    )
    assert post == Post(
        message_id=77,
        author_id=ALICE,
        author_name="Alice",
        at_ms=1_714_566_615_250,
        content="hi @Eva and @Alice and <@123>",
        bot=False,
        reply_to=70,
        attachments=("cat.png", "notes.txt"),
    )


def test_times_of_other_zones_are_the_same_instant() -> None:
    local = WHEN.astimezone(timezone(timedelta(hours=5)))
    a = post_of(message_id=1, author_id=2, author_name="a", is_bot=True, timestamp=local,
                content="")
    assert a.at_ms == 1_714_566_615_250
    assert a.bot and a.reply_to is None and a.attachments == ()


def test_edit_and_delete() -> None:
    edit = edit_of(message_id=5, content="new <@9>", edited_at=None, now_ms=123,
                   mention_names={9: "Bo"})
    assert edit == Edit(message_id=5, at_ms=123, content="new @Bo")
    stamped = edit_of(message_id=5, content="x", edited_at=WHEN, now_ms=123)
    assert stamped.at_ms == 1_714_566_615_250
    assert delete_of([9, 3, 9], 50) == Delete(message_ids=(3, 9), at_ms=50)


def test_streams_and_shards() -> None:
    assert stream_of(10, 20) == StreamId(10, 20)
    guild = (12345 << 22) | 99
    assert shard_for(guild, 1) == 0
    assert shard_for(guild, 2) == 12345 % 2
    assert shard_for(guild, 7) == 12345 % 7
    assert {shard_for(g << 22, 4) for g in range(8)} == {0, 1, 2, 3}


def test_display_name_prefers_nickname_then_global_name() -> None:
    assert display_name("Ali", "Alice G", "alice") == "Ali"
    assert display_name(None, "Alice G", "alice") == "Alice G"
    assert display_name("  ", None, "alice") == "alice"


def test_readable_keeps_unknown_mentions() -> None:
    assert readable("<@1> <@!2> <@&3> <#4>", {1: "One"}) == "@One <@!2> <@&3> <#4>"


@pytest.mark.parametrize(
    ("content", "mentioned", "referenced", "expected"),
    [
        ("hello", [], None, False),
        ("hello", [ALICE], None, False),
        ("hello", [EVA], None, True),
        (f"hey <@{EVA}>", [], None, True),
        (f"hey <@!{EVA}>", [], None, True),
        ("thanks", [], EVA, True),
        ("thanks", [], ALICE, False),
        (f"<@{EVA}0>", [], None, False),
    ],
)
def test_mentions_eva(
    content: str, mentioned: list[int], referenced: int | None, expected: bool
) -> None:
    assert mentions_eva(content, mentioned, EVA, referenced) is expected


def test_without_mention() -> None:
    assert without_mention(f"<@{EVA}> what about  the boat?", EVA) == "what about the boat?"
    assert without_mention("@Eva what about it", EVA) == "what about it"
    assert without_mention("email@Eva.com", EVA) == "email@Eva.com"


# -- splitting --------------------------------------------------------------------


def test_short_text_is_one_piece() -> None:
    assert split_reply("  hello  ") == ["hello"]
    assert split_reply("") == []
    assert split_reply("   \n ") == []


def test_splits_at_paragraphs_first() -> None:
    first = "a" * 1200
    second = "b" * 1200
    assert split_reply(f"{first}\n\n{second}") == [first, second]


def test_splits_at_lines_then_words() -> None:
    lines = "\n".join(["word " * 80] * 10)  # 10 lines of 400 characters: 4 fit in a piece
    pieces = split_reply(lines)
    assert [p.count("\n") for p in pieces] == [3, 3, 1]
    assert all(utf16_units(p) <= 2000 and p.endswith("word") for p in pieces)
    words = "lorem " * 1000
    pieces = split_reply(words)
    assert all(utf16_units(p) <= 2000 and p.endswith("lorem") for p in pieces)
    assert " ".join(pieces).split() == words.split()


def test_no_space_cuts_between_characters_counting_utf16() -> None:
    text = "😀" * 1500  # 3000 UTF-16 units
    pieces = split_reply(text)
    assert pieces == ["😀" * 1000, "😀" * 500]


def test_a_combining_sequence_is_never_cut() -> None:
    text = "x" * 1999 + "e\u0301" + "y" * 10
    pieces = split_reply(text)
    assert pieces[0] == "x" * 1999
    assert pieces[1].startswith("e\u0301")


def test_a_zwj_sequence_is_never_cut() -> None:
    family = "👩\u200d👩\u200d👧"
    text = "x" * 1997 + family
    pieces = split_reply(text)
    assert "".join(pieces) == text
    assert pieces[1] == family


@given(
    st.lists(
        st.sampled_from(["a", "b", " ", "\n", "é", "😀", "e\u0301", "中", "👩\u200d👧"]),
        max_size=1500,
    ).map("".join),
    st.integers(min_value=8, max_value=300),
)
def test_pieces_fit_and_keep_every_character(text: str, limit: int) -> None:
    pieces = split_reply(text, limit)
    assert all(0 < utf16_units(p) <= limit for p in pieces)
    assert all(p == p.strip() for p in pieces)
    assert "".join(pieces).replace(" ", "").replace("\n", "") == text.replace(" ", "").replace(
        "\n", ""
    )
    for piece in pieces[1:]:
        assert unicodedata.combining(piece[0]) == 0


# -- offline answers ----------------------------------------------------------------


def hit(text: str, author: str = "alice", is_hit: bool = True) -> RecallLine:
    return RecallLine(index=1, at_ms=0, time="2024-05-01 12:30", author=author, text=text,
                      hit=is_hit)


def test_offline_reply_says_so_and_quotes_hits() -> None:
    reply = offline_reply("boat", [hit("the boat is blue"), hit("context", is_hit=False)])
    assert reply.startswith(OFFLINE_NOTE)
    assert "> 2024-05-01 12:30 alice: the boat is blue" in reply
    assert "context" not in reply
    nothing = offline_reply("boat", [])
    assert OFFLINE_NOTE in nothing and "nothing" in nothing
    long = offline_reply("boat", [hit("x" * 900)] * 5)
    assert utf16_units(long) <= 2000
