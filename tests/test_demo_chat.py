# The demo's synthetic friends' chat: deterministic, valid DCE, and varied enough to use.
#
# Generated in memory only; nothing touches a store. The checks are about the
# properties the demo relies on: long messages to compress, edits, replies,
# attachments, offsets, and a recall query that hits only a few messages.
from __future__ import annotations

import time
from collections import Counter

import pytest

from eva.core.dce import ChannelExport, attachment_names, parse_export
from eva.core.render import LINE_LIMIT_BYTES, render_message
from eva.core.terms import terms
from eva.demo.friends import DEMO_QUERY, friends_export


@pytest.fixture(scope="module")
def export() -> ChannelExport:
    return parse_export(friends_export())


def test_same_arguments_give_the_same_bytes() -> None:
    assert friends_export() == friends_export()
    assert friends_export(500, seed=3) == friends_export(500, seed=3)
    assert friends_export(500, seed=3) != friends_export(500, seed=4)


def test_default_export_parses_with_the_requested_count(export: ChannelExport) -> None:
    assert len(export.messages) == 4000
    assert export.channel.name
    assert export.guild.name


@pytest.mark.parametrize("count", [0, 1, 7, 60, 1500, 6000])
def test_any_count_is_exact_with_ordered_unique_ids(count: int) -> None:
    messages = parse_export(friends_export(count)).messages
    assert len(messages) == count
    ids = [int(m.id) for m in messages]
    assert ids == sorted(ids)
    assert len(set(ids)) == count
    times = [m.timestamp for m in messages]
    assert times == sorted(times)


def test_several_people_and_a_non_ascii_name(export: ChannelExport) -> None:
    authors = Counter(m.author.nickname or m.author.name for m in export.messages)
    people = [name for name in authors if authors[name] > 100]
    assert 5 <= len(people) <= 7
    assert any(not name.isascii() for name in authors)
    assert any(m.author.is_bot for m in export.messages)


def test_long_messages_edits_replies_attachments_and_offsets(export: ChannelExport) -> None:
    messages = export.messages
    rendered = [
        render_message(m.author.nickname or m.author.name, m.content, attachment_names(m))
        for m in messages
    ]
    long = sum(len(text.encode()) > LINE_LIMIT_BYTES for text in rendered)
    assert 5 <= long <= 200
    assert sum(m.timestamp_edited is not None for m in messages) >= 10
    by_id = {m.id: m for m in messages}
    replies = [m for m in messages if m.reference is not None]
    assert len(replies) >= 50
    for reply in replies:
        assert reply.reference is not None
        target = by_id[str(reply.reference.message_id)]
        assert target.timestamp < reply.timestamp
    assert sum(bool(m.attachments) for m in messages) >= 50
    offsets = {m.timestamp.utcoffset() for m in messages}
    assert len(offsets) >= 3
    assert any(offset and offset.total_seconds() != 0 for offset in offsets)


def test_the_year_has_quiet_days_and_busy_days(export: ChannelExport) -> None:
    days = Counter(m.timestamp.date() for m in export.messages)
    assert 200 <= len(days) < 365
    assert max(days.values()) >= 40


def test_demo_query_hits_only_a_few_messages(export: ChannelExport) -> None:
    wanted = set(terms(DEMO_QUERY))
    hits = [m for m in export.messages if wanted <= set(terms(m.content))]
    assert 3 <= len(hits) <= 10


def test_four_thousand_messages_are_quick() -> None:
    started = time.perf_counter()
    friends_export(4000, seed=11)
    assert time.perf_counter() - started < 1.0
