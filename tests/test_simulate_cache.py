"""The prompt cache model, and `eva simulate-cache` on a small generated export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eva.cli.cmd_simulate_cache import reply_turns
from eva.cli.main import main
from eva.core.cache_model import Block, CacheSimulator, RequestUsage
from eva.core.costs import cost_of
from eva.core.events import MessagePosted, Usage
from eva.core.settings import Price
from eva.demo.friends import friends_export

SYSTEM = Block(1000, "system", mark=True)
ROW = Block(5000, "row-1", mark=True)
OTHER_ROW = Block(5000, "row-2", mark=True)


def tail(*keys: str) -> list[Block]:
    """Tail blocks of 100 tokens each, the newest marked."""
    return [Block(100, key, mark=i == len(keys) - 1) for i, key in enumerate(keys)]


def new(key: str) -> Block:
    return Block(20, key)


def test_a_request_reads_the_longest_live_prefix_and_writes_up_to_its_last_mark() -> None:
    cache = CacheSimulator(ttl_s=300)
    first = cache.request([SYSTEM, ROW, *tail("a"), new("q1")], now_s=0)
    assert first == RequestUsage(read=0, write=6100, uncached=20)
    # the tail grew by one stretch: everything up to the old tail mark is read
    second = cache.request([SYSTEM, ROW, *tail("a", "b"), new("q2")], now_s=60)
    assert second == RequestUsage(read=6100, write=100, uncached=20)
    # the same prefix with another tail block: only the row's prefix matches
    third = cache.request([SYSTEM, ROW, *tail("c"), new("q3")], now_s=70)
    assert third == RequestUsage(read=6000, write=100, uncached=20)
    # a new row: only tools + system are read, the row and tail written again
    swapped = cache.request([SYSTEM, OTHER_ROW, *tail("a", "b"), new("q4")], now_s=80)
    assert swapped == RequestUsage(read=1000, write=5200, uncached=20)
    assert swapped.total == 6220


def test_a_prefix_never_marked_is_never_read() -> None:
    cache = CacheSimulator(ttl_s=300)
    cache.request([Block(1000, "a", mark=True), Block(500, "b"), new("q")], now_s=0)
    again = cache.request([Block(1000, "a"), Block(500, "b", mark=True), new("q")], now_s=1)
    assert again == RequestUsage(read=1000, write=500, uncached=20)
    no_marks = cache.request([Block(1000, "a"), Block(500, "b")], now_s=2)
    assert no_marks == RequestUsage(read=0, write=0, uncached=1500)


def test_entries_live_from_their_last_read() -> None:
    cache = CacheSimulator(ttl_s=300)
    prompt = [SYSTEM, ROW, new("q")]
    assert cache.request(prompt, now_s=0).read == 0
    assert cache.request(prompt, now_s=250).read == 6000  # 250 s after the write
    assert cache.request(prompt, now_s=540).read == 6000  # 290 s after the last read
    assert cache.request(prompt, now_s=840).read == 0  # 300 s after it: gone
    assert cache.request(prompt, now_s=841).read == 6000  # the miss wrote it again


def test_an_hour_long_entry_outlives_a_five_minute_one() -> None:
    prompt = [SYSTEM, ROW, new("q")]
    short, long = CacheSimulator(ttl_s=300), CacheSimulator(ttl_s=3600)
    for cache in (short, long):
        cache.request(prompt, now_s=0)
    assert short.request(prompt, now_s=1800).read == 0
    assert long.request(prompt, now_s=1800).read == 6000


def test_lookback_finds_an_entry_only_within_twenty_blocks_of_a_mark() -> None:
    cache = CacheSimulator(ttl_s=300)
    cache.request([Block(1000, "base", mark=True)], now_s=0)
    near = [Block(1000, "base"), *tail(*(f"n{i}" for i in range(20)))]
    assert cache.request(near, now_s=1).read == 1000
    far = [Block(1000, "base"), *tail(*(f"f{i}" for i in range(21)))]
    assert cache.request(far, now_s=2).read == 0


def test_writes_cost_more_for_an_hour_than_for_five_minutes() -> None:
    cache = CacheSimulator(ttl_s=300)
    usage = cache.request([SYSTEM, ROW, new("q")], now_s=0)
    price = Price(input=3.0, output=15.0)
    as_usage = Usage(
        input_tokens=usage.uncached,
        cache_write_tokens=usage.write,
        cache_read_tokens=usage.read,
    )
    assert cost_of(as_usage, price, cache_ttl="5m") == pytest.approx((20 * 3 + 6000 * 3.75) / 1e6)
    assert cost_of(as_usage, price, cache_ttl="1h") == pytest.approx((20 * 3 + 6000 * 6) / 1e6)
    read_back = cache.request([SYSTEM, ROW, new("q2")], now_s=1)
    as_read = Usage(input_tokens=read_back.uncached, cache_read_tokens=read_back.read)
    assert cost_of(as_read, price) == pytest.approx((20 * 3 + 6000 * 0.3) / 1e6)


def test_reply_turns_are_mentions_of_eva_and_every_nth_message() -> None:
    texts = ["hey Eva!", "@eva what was that", "let me evaluate", "EVA?", "ok", "lol"]
    posts = [
        MessagePosted(at_ms=i, index=i, message_id=i + 1, author_id=1, author_name="Al",
                      content=text)
        for i, text in enumerate(texts)
    ]
    assert reply_turns(posts, None) == {0, 1, 3}
    assert reply_turns(posts, 2) == {0, 1, 3, 5}


SMALL_MEMORY = (
    "[memory]\ncompress_at_bytes = 8192\ntail_keep_bytes = 2048\n"
    "row_high_bytes = 8192\nrow_low_bytes = 4096\noverflow_tail_bytes = 16384\n"
)


@pytest.fixture
def simulated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    export = tmp_path / "friends.json"
    export.write_bytes(friends_export(1500))
    settings = tmp_path / "small.toml"
    settings.write_text(SMALL_MEMORY)
    capsys.readouterr()
    args = ["simulate-cache", str(export), "--every", "5", "--settings", str(settings), "--json"]
    assert main(args) == 0
    value = json.loads(capsys.readouterr().out)
    assert isinstance(value, dict)
    assert not list(tmp_path.glob("data*")), "the simulation wrote outside its temporary directory"
    return value


def test_simulate_cache_reports_every_policy_and_ttl(simulated: dict[str, object]) -> None:
    assert simulated["messages"] == 1500
    assert "bytes / 4" in str(simulated["tokens"])
    results = simulated["results"]
    assert isinstance(results, list)
    assert {(r["policy"], r["ttl"]) for r in results} == {
        ("quiet", "5m"), ("quiet", "1h"), ("eager", "5m"), ("eager", "1h")
    }
    for r in results:
        assert r["reply_turns"] == 300
        assert r["prompt_tokens"] == (
            r["cache_read_tokens"] + r["cache_write_tokens"] + r["uncached_tokens"]
        )
        assert 0 < r["reply_cache_read_share"] < 1
        assert r["usd_per_reply"] > 0
        assert r["usd_total"] == pytest.approx(r["usd_per_reply"] * 300, rel=1e-3)
        assert r["publishes"] > 1


def test_quiet_swapping_reads_more_from_cache_than_eager(simulated: dict[str, object]) -> None:
    results = simulated["results"]
    assert isinstance(results, list)
    share = {(r["policy"], r["ttl"]): r["reply_cache_read_share"] for r in results}
    for ttl in ("5m", "1h"):
        assert share[("quiet", ttl)] > share[("eager", ttl)]
    for policy in ("quiet", "eager"):
        assert share[(policy, "1h")] >= share[(policy, "5m")]


def test_a_question_on_a_clock_keeps_the_cache_warm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    export = tmp_path / "friends.json"
    export.write_bytes(friends_export(300))
    capsys.readouterr()
    args = ["simulate-cache", str(export), "--every-minutes", "3", "--policy", "quiet",
            "--ttl", "5m", "--json"]
    assert main(args) == 0
    [result] = json.loads(capsys.readouterr().out)["results"]
    assert result["reply_turns"] > 300
    assert result["reply_cache_read_share"] > 0.99
