"""What recorded model usage costs: the pure maths and `eva cost` on a small store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from eva.cli.cmd_cost import load_model_settings
from eva.cli.main import main
from eva.core.costs import cost_of, sum_costs
from eva.core.events import (
    AnyEvent,
    ChannelDescribed,
    LineWritten,
    MessagePosted,
    ReplyWritten,
    Usage,
)
from eva.core.keys import StreamId
from eva.core.settings import Price, default_prices
from eva.store.event_store import EventStore
from eva.store.lmdb_kv import open_backend

SONNET = Price(input=3.0, output=15.0)
HAIKU_LINE = Usage(input_tokens=1000, output_tokens=200)
SONNET_REPLY = Usage(
    input_tokens=500, output_tokens=100, cache_write_tokens=2000, cache_read_tokens=10_000
)
STREAM = StreamId(41, 42)


def test_cost_of_charges_each_kind_of_token_at_its_rate() -> None:
    # 500 x 3 + 100 x 15 + 2000 x 3.75 (1.25 x input) + 10,000 x 0.3 (0.1 x input), per million
    assert cost_of(SONNET_REPLY, SONNET) == pytest.approx(0.0135)
    # an hour-long cache entry is written at 2 x input: 2000 x 6 instead of 2000 x 3.75
    assert cost_of(SONNET_REPLY, SONNET, cache_ttl="1h") == pytest.approx(0.018)
    assert cost_of(SONNET_REPLY, SONNET, batch=True) == pytest.approx(0.00675)


def test_cost_of_uses_explicit_cache_prices_over_the_multiples() -> None:
    price = Price(input=3.0, output=15.0, cache_write_5m=4.0, cache_read=1.0)
    usage = Usage(cache_write_tokens=1_000_000, cache_read_tokens=1_000_000)
    assert cost_of(usage, price) == pytest.approx(5.0)
    with pytest.raises(ValueError, match="cache_ttl"):
        cost_of(usage, price, cache_ttl="1d")


def _line(start: int, how: str, model: str = "", usage: Usage | None = None) -> LineWritten:
    return LineWritten(
        at_ms=1000, start=start, size=1, text=f"line {start}", first_ms=1000, last_ms=1000,
        authors=(7,), how=how, model=model, usage=usage,  # type: ignore[arg-type]
    )


def _events() -> list[AnyEvent]:
    posts: list[AnyEvent] = [
        MessagePosted(at_ms=1000, index=i, message_id=100 + i, author_id=7,
                      author_name="Ana", content=f"message {i}")
        for i in range(4)
    ]
    return [
        ChannelDescribed(at_ms=1000, guild_id=41, channel_id=42, channel_name="general"),
        *posts,
        _line(0, "model", "claude-haiku-5-5", HAIKU_LINE),
        _line(1, "model", "mystery-model", HAIKU_LINE),
        _line(2, "model", "offline"),
        _line(3, "verbatim"),
        ReplyWritten(at_ms=2000, model="claude-sonnet-5-5", usage=SONNET_REPLY),
        ReplyWritten(at_ms=3000, model="offline", usage=Usage()),
    ]


def test_sum_costs_splits_lines_and_replies_and_never_prices_an_unknown_model() -> None:
    report = sum_costs(_events(), default_prices())
    haiku = report.rows[("claude-haiku-5-5", "lines")]
    assert (haiku.calls, haiku.input_tokens, haiku.output_tokens) == (1, 1000, 200)
    assert haiku.usd == pytest.approx(0.002)
    assert report.rows[("claude-sonnet-5-5", "replies")].usd == pytest.approx(0.0135)
    assert report.rows[("mystery-model", "lines")].usd is None
    assert report.unpriced == ["mystery-model"]
    assert report.usd == pytest.approx(0.0155)
    assert (report.offline_lines, report.offline_replies, report.free_lines) == (1, 1, 1)


def test_the_part_of_a_line_sent_as_a_message_batch_costs_half() -> None:
    def line(batch_usage: Usage | None) -> LineWritten:
        return LineWritten(
            at_ms=0, start=0, size=2, text="a line", first_ms=0, last_ms=0, how="model",
            model="claude-haiku-5-5", usage=HAIKU_LINE, batch_usage=batch_usage,
        )

    prices = default_prices()
    direct = sum_costs([line(None)], prices).usd
    batched = sum_costs([line(HAIKU_LINE)], prices).usd
    half_of_input = Usage(input_tokens=500)
    mixed = sum_costs([line(half_of_input)], prices).usd
    assert batched == pytest.approx(direct / 2)
    assert mixed == pytest.approx(direct - cost_of(half_of_input, prices["claude-haiku-5-5"]) / 2)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    directory = tmp_path / "data"
    backend = open_backend(directory)
    EventStore(backend).append(STREAM, _events())
    backend.close()
    return directory


def test_eva_cost_sums_the_store_at_list_prices(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["cost", "--data", str(data), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    total = result["total"]
    assert total["usd"] == pytest.approx(0.0155)
    assert total["lines_usd"] == pytest.approx(0.002)
    assert total["replies_usd"] == pytest.approx(0.0135)
    assert total["unpriced"] == ["mystery-model"]
    assert (total["offline_lines"], total["offline_replies"]) == (1, 1)
    [channel] = result["channels"]
    assert channel["name"] == "general"
    assert channel["usd"] == pytest.approx(0.0155)

    assert main(["cost", "general", "--data", str(data)]) == 0
    text = capsys.readouterr().out
    assert "$0.0155" in text
    assert "unpriced" in text and "mystery-model" in text
    assert "1 lines and 1 replies made offline" in text


def test_eva_cost_reads_prices_and_cache_ttl_from_the_models_table(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "eva.toml"
    settings.write_text(
        '[models]\ncache_ttl = "1h"\n'
        '[models.prices.mystery-model]\ninput = 2.0\noutput = 10.0\n'
    )
    models = load_model_settings(settings)
    assert models.prices["mystery-model"] == Price(input=2.0, output=10.0)
    assert models.prices["claude-haiku-5-5"] == default_prices()["claude-haiku-5-5"]
    capsys.readouterr()
    assert main(["cost", "--data", str(data), "--settings", str(settings), "--json"]) == 0
    total = json.loads(capsys.readouterr().out)["total"]
    # haiku 0.002 + mystery (1000 x 2 + 200 x 10) / 1e6 + the reply with 1h writes 0.018
    assert total["usd"] == pytest.approx(0.002 + 0.004 + 0.018)
    assert total["unpriced"] == []


def test_bad_model_settings_are_a_user_error(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "eva.toml"
    settings.write_text('[models]\ncache_ttl = "1d"\n')
    assert main(["cost", "--data", str(data), "--settings", str(settings)]) == 1
    assert "cache_ttl must be '5m' or '1h'" in capsys.readouterr().err
