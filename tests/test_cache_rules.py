"""The prompt cache's rules as Eva models them, and the fake Messages API that keeps them."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import pytest

from eva.core.costs import cost_of
from eva.core.prices import default_prices
from eva.plan.cache_model import Block, CacheRuleError, CacheSimulator, RequestUsage
from eva.testing.fake_anthropic import FakeMessagesAPI, tokens

SYSTEM = Block(1000, "system", "1h")
ROW = Block(5000, "row-1", "1h")
OTHER_ROW = Block(5000, "row-2", "1h")


def tail(*keys: str, ttl: str = "5m") -> list[Block]:
    """Tail blocks of 100 tokens each, the newest marked."""
    return [Block(100, key, ttl if i == len(keys) - 1 else None) for i, key in enumerate(keys)]


def new(key: str) -> Block:
    return Block(20, key)


def test_a_request_reads_the_longest_live_prefix_and_writes_each_part_at_its_lifetime() -> None:
    cache = CacheSimulator()
    first = cache.request([SYSTEM, ROW, *tail("a"), new("q1")], now_s=0)
    assert first == RequestUsage(read=0, write_1h=6000, write_5m=100, uncached=20)
    # the tail grew by one chunk: everything up to the old tail mark is read
    second = cache.request([SYSTEM, ROW, *tail("a", "b"), new("q2")], now_s=60)
    assert second == RequestUsage(read=6100, write_5m=100, uncached=20)
    # the same prefix with another tail: only the row's prefix matches
    third = cache.request([SYSTEM, ROW, *tail("c"), new("q3")], now_s=70)
    assert third == RequestUsage(read=6000, write_5m=100, uncached=20)
    # a new row: only the system prompt is read; row and tail are written again
    swapped = cache.request([SYSTEM, OTHER_ROW, *tail("a", "b"), new("q4")], now_s=80)
    assert swapped == RequestUsage(read=1000, write_1h=5000, write_5m=200, uncached=20)
    assert swapped.total == 6220


def test_each_entry_lives_its_own_lifetime() -> None:
    cache = CacheSimulator()
    cache.request([SYSTEM, ROW, *tail("a"), new("q")], now_s=0)
    # ten minutes on: the five-minute tail is gone, the hour-long row is not
    later = cache.request([SYSTEM, ROW, *tail("a"), new("q")], now_s=600)
    assert later == RequestUsage(read=6000, write_5m=100, uncached=20)
    # a read refreshes: 59 minutes after that read the row is still there
    assert cache.request([SYSTEM, ROW, new("q")], now_s=600 + 59 * 60).read == 6000
    # an hour after the last read it is gone
    assert cache.request([SYSTEM, ROW, new("q")], now_s=600 + 59 * 60 + 3600).read == 0


def test_a_prefix_never_marked_is_never_read() -> None:
    cache = CacheSimulator()
    cache.request([Block(1000, "a", "5m"), Block(500, "b"), new("q")], now_s=0)
    again = cache.request([Block(1000, "a"), Block(500, "b", "5m"), new("q")], now_s=1)
    assert again == RequestUsage(read=1000, write_5m=500, uncached=20)
    no_marks = cache.request([Block(1000, "a"), Block(500, "b")], now_s=2)
    assert no_marks == RequestUsage(uncached=1500)


def test_lookback_counts_twenty_positions_with_the_mark_itself() -> None:
    cache = CacheSimulator()
    cache.request([Block(1000, "base", "5m")], now_s=0)
    near = [Block(1000, "base"), *tail(*(f"n{i}" for i in range(19)))]
    assert cache.request(near, now_s=1).read == 1000
    far = [Block(1000, "base"), *tail(*(f"f{i}" for i in range(20)))]
    assert cache.request(far, now_s=2).read == 0


def test_a_mark_before_the_shortest_cached_prefix_caches_nothing() -> None:
    cache = CacheSimulator(min_tokens=512)
    small = [Block(300, "system", "1h"), new("q")]
    assert cache.request(small, now_s=0) == RequestUsage(uncached=320)
    assert cache.request(small, now_s=1) == RequestUsage(uncached=320)
    big = [Block(300, "system", "1h"), Block(300, "row", "1h"), new("q")]
    assert cache.request(big, now_s=2) == RequestUsage(write_1h=600, uncached=20)
    assert cache.request(big, now_s=3) == RequestUsage(read=600, uncached=20)


def test_the_providers_refusals() -> None:
    cache = CacheSimulator()
    with pytest.raises(CacheRuleError, match="'1h' may not come after one with ttl '5m'"):
        cache.request([Block(100, "a", "5m"), Block(100, "b", "1h")], now_s=0)
    with pytest.raises(CacheRuleError, match="at most 4 cache marks; this one has 5"):
        cache.request([Block(100, str(i), "5m") for i in range(5)], now_s=0)
    # four marks, hour-long ones first, are fine
    cache.request([Block(100, "a", "1h"), Block(100, "b", "1h"), *tail("c", "d")], now_s=0)


def test_mixed_lifetimes_are_billed_at_their_own_rates() -> None:
    cache = CacheSimulator()
    usage = cache.request([SYSTEM, ROW, *tail("a"), new("q")], now_s=0).usage(output_tokens=50)
    haiku = default_prices()["claude-haiku-5-5"]
    # 6,000 written for an hour at 0.20, 100 for five minutes at 0.125, 20 plain at 0.10,
    # 50 out at 0.50, per million
    expected = (6000 * 0.20 + 100 * 0.125 + 20 * 0.10 + 50 * 0.50) / 1e6
    assert cost_of(usage, haiku) == pytest.approx(expected)


# -- the fake Messages API keeps the same rules ------------------------------------------


@pytest.fixture
def fake() -> Iterator[FakeMessagesAPI]:
    with FakeMessagesAPI().serve() as running:
        yield running


def test_the_fake_refuses_a_one_hour_mark_after_a_five_minute_one(fake: FakeMessagesAPI) -> None:
    client = anthropic.Anthropic(api_key=fake.key, base_url=fake.url, max_retries=0)
    with pytest.raises(anthropic.BadRequestError, match="may not come after"):
        client.messages.create(
            model="claude-haiku-5-5",
            max_tokens=10,
            system=[{"type": "text", "text": "sys " * 400, "cache_control": {"type": "ephemeral"}}],
            messages=[{"role": "user", "content": [
                {"type": "text", "text": "row " * 400,
                 "cache_control": {"type": "ephemeral", "ttl": "1h"}},
            ]}],
        )


def test_the_fake_reports_writes_per_lifetime_and_counts_tokens(fake: FakeMessagesAPI) -> None:
    client = anthropic.Anthropic(api_key=fake.key, base_url=fake.url, max_retries=0)
    system = "sys " * 400
    row = "row " * 300
    messages: list[anthropic.types.MessageParam] = [{"role": "user", "content": [
        {"type": "text", "text": row, "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "question"},
    ]}]
    reply = client.messages.create(
        model="claude-haiku-5-5",
        max_tokens=10,
        system=[{"type": "text", "text": system,
                 "cache_control": {"type": "ephemeral", "ttl": "1h"}}],
        messages=messages,
    )
    usage = reply.usage
    assert usage.cache_creation is not None
    assert usage.cache_creation.ephemeral_1h_input_tokens == tokens(system)
    assert usage.cache_creation.ephemeral_5m_input_tokens == tokens(row)
    assert usage.input_tokens == tokens("question")
    counted = client.messages.count_tokens(
        model="claude-haiku-5-5", system=system, messages=messages
    )
    assert counted.input_tokens == tokens(system) + tokens(row) + tokens("question")
