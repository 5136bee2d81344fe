"""What recorded model usage costs: the pure maths and `eva cost` on a small store."""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from eva.cli.cmd_cost import load_model_settings
from eva.cli.common import UserError
from eva.cli.main import main
from eva.core.costs import cost_of, reply_cost, sum_costs
from eva.core.events import (
    AnyEvent,
    ChannelDescribed,
    LineWritten,
    MessagePosted,
    ReplyWritten,
    Usage,
)
from eva.core.keys import StreamId
from eva.core.prices import Price, default_prices
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


HAIKU_55 = default_prices()["claude-haiku-5-5"]


def test_a_haiku_5_5_request_just_under_the_long_prompt_tier_pays_the_base_rates() -> None:
    # 99,000 uncached + 1,000 read = a prompt of exactly 100,000 tokens: "up to 100,000"
    usage = Usage(input_tokens=99_000, cache_read_tokens=1_000, output_tokens=500)
    assert usage.prompt_tokens == 100_000
    # 99,000 x 0.10 + 1,000 x 0.01 + 500 x 0.50 = 10,160 per million
    assert cost_of(usage, HAIKU_55) == pytest.approx(0.01016)


def test_a_haiku_5_5_request_just_over_the_tier_pays_five_times_on_every_token() -> None:
    usage = Usage(input_tokens=99_001, cache_read_tokens=1_000, output_tokens=500)
    # 99,001 x 0.50 + 1,000 x 0.05 + 500 x 2.50 = 50,800.5 per million: output too
    assert cost_of(usage, HAIKU_55) == pytest.approx(0.0508005)
    # cache writes count toward the prompt as well
    written = Usage(input_tokens=50_000, cache_write_tokens=50_001)
    assert cost_of(written, HAIKU_55) == pytest.approx((50_000 * 0.50 + 50_001 * 0.625) / 1e6)


def test_one_hour_and_five_minute_writes_in_one_request_each_pay_their_rate() -> None:
    usage = Usage(
        input_tokens=1_000,
        output_tokens=200,
        cache_write_tokens=30_000,
        cache_write_1h_tokens=20_000,
        cache_read_tokens=5_000,
    )
    # 1,000 x 0.10 + 200 x 0.50 + 10,000 x 0.125 + 20,000 x 0.20 + 5,000 x 0.01 = 5,500
    assert cost_of(usage, HAIKU_55) == pytest.approx(0.0055)
    sonnet = default_prices()["claude-sonnet-5-5"]
    # 1,000 x 2 + 200 x 10 + 10,000 x 2.50 + 20,000 x 4 + 5,000 x 0.20 = 110,000
    assert cost_of(usage, sonnet) == pytest.approx(0.11)


def test_a_batch_pays_half_of_input_and_output() -> None:
    usage = Usage(input_tokens=4_000, output_tokens=300)
    # (4,000 x 0.10 + 300 x 0.50) / 2 = 275 per million
    assert cost_of(usage, HAIKU_55, batch=True) == pytest.approx(0.000275)
    assert cost_of(usage, default_prices()["claude-haiku-4-5"], batch=True) == pytest.approx(
        (4_000 * 1.0 + 300 * 5.0) / 2 / 1e6
    )


def test_a_reply_is_priced_request_by_request_so_two_rounds_never_add_up_to_the_tier() -> None:
    round_usage = Usage(input_tokens=10_000, cache_read_tokens=50_000, output_tokens=100)
    reply = ReplyWritten(
        at_ms=0,
        model="claude-haiku-5-5",
        usage=Usage(input_tokens=20_000, cache_read_tokens=100_000, output_tokens=200),
        requests=(round_usage, round_usage),
    )
    # each round: 10,000 x 0.10 + 50,000 x 0.01 + 100 x 0.50 = 1,550 per million
    assert reply_cost(reply, HAIKU_55) == pytest.approx(2 * 0.00155)
    # priced as one request of 120,000 tokens it would pay the long-prompt rates
    assert cost_of(reply.usage, HAIKU_55) == pytest.approx(
        (20_000 * 0.5 + 100_000 * 0.05 + 200 * 2.5) / 1e6
    )


def test_the_price_table_refuses_nonsense(tmp_path: Path) -> None:
    settings = tmp_path / "eva.toml"
    settings.write_text('[models.prices.claude-haiku-5-5]\ninput = -1.0\noutput = 1.0\n')
    with pytest.raises(UserError, match="must not be negative"):
        load_model_settings(settings)


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
    # Haiku 5.5: 1000 x $0.10 + 200 x $0.50 per million
    assert haiku.usd == pytest.approx(0.0002)
    # Sonnet 5.5: 500 x 2 + 100 x 10 + 2000 x 2.50 (5-minute writes) + 10,000 x 0.20 (reads)
    assert report.rows[("claude-sonnet-5-5", "replies")].usd == pytest.approx(0.009)
    assert report.rows[("mystery-model", "lines")].usd is None
    assert report.unpriced == ["mystery-model"]
    assert report.usd == pytest.approx(0.0092)
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
    assert total["usd"] == pytest.approx(0.0092)
    assert total["lines_usd"] == pytest.approx(0.0002)
    assert total["replies_usd"] == pytest.approx(0.009)
    assert total["unpriced"] == ["mystery-model"]
    assert (total["offline_lines"], total["offline_replies"]) == (1, 1)
    [channel] = result["channels"]
    assert channel["name"] == "general"
    assert channel["usd"] == pytest.approx(0.0092)

    assert main(["cost", "general", "--data", str(data)]) == 0
    text = capsys.readouterr().out
    assert "$0.0092" in text
    assert "unpriced" in text and "mystery-model" in text
    assert "1 lines and 1 replies made offline" in text


def test_eva_cost_reads_prices_and_the_cache_layout_from_the_models_table(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "eva.toml"
    settings.write_text(
        '[models]\ncache_layout = "1h"\n'
        '[models.prices.mystery-model]\ninput = 2.0\noutput = 10.0\n'
    )
    models = load_model_settings(settings)
    assert models.prices["mystery-model"] == Price(input=2.0, output=10.0)
    assert models.prices["claude-haiku-5-5"] == default_prices()["claude-haiku-5-5"]
    capsys.readouterr()
    assert main(["cost", "--data", str(data), "--settings", str(settings), "--json"]) == 0
    total = json.loads(capsys.readouterr().out)["total"]
    # haiku 0.0002 + mystery (1000 x 2 + 200 x 10) / 1e6 + the reply, recorded before writes
    # were split by lifetime, priced as the layout's hour-long writes at $4:
    # (500 x 2 + 100 x 10 + 2000 x 4 + 10,000 x 0.20) / 1e6 = 0.012
    assert total["usd"] == pytest.approx(0.0002 + 0.004 + 0.012)
    assert total["unpriced"] == []


def test_bad_model_settings_are_a_user_error(
    data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "eva.toml"
    settings.write_text('[models]\ncache_layout = "weekly"\n')
    assert main(["cost", "--data", str(data), "--settings", str(settings)]) == 1
    assert "cache_layout must be one of long, split" in capsys.readouterr().err
    settings.write_text('[models]\nreply_effort = "huge"\n')
    assert main(["cost", "--data", str(data), "--settings", str(settings)]) == 1
    assert "reply_effort must be one of low" in capsys.readouterr().err


def test_a_price_is_changed_field_by_field(tmp_path: Path) -> None:
    settings = tmp_path / "eva.toml"
    settings.write_text('[models.prices.claude-haiku-5-5]\nbytes_per_token = 2.9\n')
    haiku = load_model_settings(settings).prices["claude-haiku-5-5"]
    assert haiku == msgspec.structs.replace(default_prices()["claude-haiku-5-5"],
                                            bytes_per_token=2.9)
    settings.write_text('[models.prices.new-model]\nbytes_per_token = 2.9\n')
    with pytest.raises(UserError, match=r"prices of new-model: .*input"):
        load_model_settings(settings)


def test_eva_calibrate_measures_bytes_per_token_through_the_counting_api(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from eva.demo.friends import friends_export
    from eva.testing.fake_anthropic import FakeMessagesAPI

    export = tmp_path / "friends.json"
    export.write_bytes(friends_export(300))
    data = tmp_path / "data"
    assert main(["import", str(export), "--data", str(data)]) == 0
    settings = tmp_path / "eva.toml"
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    capsys.readouterr()
    assert main(["calibrate", "friends", "--data", str(data)]) == 1
    assert "ANTHROPIC_API_KEY" in capsys.readouterr().err
    with FakeMessagesAPI().serve() as fake:
        settings.write_text(f'[models]\nbase_url = "{fake.url}"\n')
        monkeypatch.setenv("ANTHROPIC_API_KEY", fake.key)
        assert main(["calibrate", "friends", "--data", str(data), "--settings", str(settings),
                     "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        counted = [r for r in fake.requests if r.path == "/v1/messages/count_tokens"]
    assert result["memory_bytes"] > 1000
    [row] = result["models"]  # replies and lines use the same model by default
    assert row["model"] == "claude-haiku-5-5"
    # the fake counts 2.7 bytes a token, which is what the table says too
    assert row["bytes_per_token"] == pytest.approx(2.7, rel=0.01)
    assert abs(row["table_error"]) < 0.01
    assert len(counted) == 2 and all(r.body["model"] == "claude-haiku-5-5" for r in counted)
    monkeypatch.setenv("ANTHROPIC_API_KEY", "wrong")
    with FakeMessagesAPI().serve() as fake:
        settings.write_text(f'[models]\nbase_url = "{fake.url}"\n')
        assert main(["calibrate", "friends", "--data", str(data), "--settings",
                     str(settings)]) == 1
    err = capsys.readouterr().err
    assert "refused: 401" in err and "Traceback" not in err


def test_eva_status_shows_each_guilds_spend_this_month_against_its_plan(
    data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    capsys.readouterr()
    assert main(["status", "--data", str(data), "--month", "1970-01", "--json"]) == 0
    [guild] = json.loads(capsys.readouterr().out)["guilds"]
    assert guild["guild_id"] == 41 and guild["month"] == "1970-01"
    assert guild["usd"] == pytest.approx(0.0092)
    assert guild["replies_usd"] == pytest.approx(0.009)
    assert guild["plan_usd"] == 15.0 and guild["plan_replies"] == 1500
    assert guild["reply_cap"] == 1500
    assert guild["share_of_plan"] == pytest.approx(0.0092 / 15, abs=1e-6)
    assert guild["unpriced"] == ["mystery-model"]
    assert main(["status", "--data", str(data), "--month", "1970-02", "--json"]) == 0
    [later] = json.loads(capsys.readouterr().out)["guilds"]
    assert later["usd"] == 0
    assert main(["status", "--data", str(data), "--month", "1970-01"]) == 0
    out = capsys.readouterr().out
    assert "guild 41" in out and "$0.0092 spent at list prices" in out
    assert "0 of 1,500 replies (replies_per_guild_month)" in out
    assert main(["status", "--data", str(data), "--month", "January"]) == 1
    assert "--month must be YYYY-MM" in capsys.readouterr().err
    assert main(["status", "--data", str(data), "--month", "9999-12"]) == 1  # no month after
    assert "--month must be YYYY-MM" in capsys.readouterr().err
