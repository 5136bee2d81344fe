# `eva tree`: the SVG of a channel's tree, from a real LMDB store and from a big shape.
#
# Each store test writes its own events into a fresh directory under tmp_path
# (the backend is cached per path and closed at the end); the big tree is a
# `TreeShape` built in memory, since only the drawing's size is in question.
from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path

import pytest

from eva.cli.cmd_tree import RowBox, TreeShape, draw_tree
from eva.cli.main import main
from eva.core.address import Address, format_address
from eva.core.events import AnyEvent, ChannelDescribed, LineWritten, MessagePosted, RowPublished
from eva.core.keys import StreamId
from eva.store import lmdb_kv
from eva.store.event_store import EventStore

STREAM = StreamId(31, 32)
CHANNEL = "friends"
SVG = "{http://www.w3.org/2000/svg}"
BASE_MS = 1_735_689_600_000  # 2025-01-01 UTC
ROW = ((0, 16), (16, 8), (24, 4), (28, 2), (30, 1))


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "data"
    yield path
    if (path / "data.mdb").exists():
        lmdb_kv.open_backend(path).close()


def _events(messages: int = 40, glued_to: int = 32) -> list[AnyEvent]:
    events: list[AnyEvent] = [
        ChannelDescribed(
            at_ms=BASE_MS, guild_id=STREAM.guild_id, channel_id=STREAM.channel_id,
            guild_name="Flat", channel_name=CHANNEL,
        )
    ]
    texts = {}
    for index in range(messages):
        at = BASE_MS + index * 3_600_000
        events.append(
            MessagePosted(
                at_ms=at, index=index, message_id=1000 + index, author_id=7,
                author_name="Zoë", content=f"m{index} <&>",
            )
        )
    for index in range(messages):
        texts[(index, 1)] = f"Zoë: m{index} <&>"
        events.append(
            LineWritten(
                at_ms=BASE_MS + index * 3_600_000, start=index, size=1, text=texts[(index, 1)],
                first_ms=BASE_MS + index * 3_600_000, last_ms=BASE_MS + index * 3_600_000,
            )
        )
    size = 2
    while size <= 16:
        for start in range(0, glued_to - size + 1, size):
            half = size // 2
            text = "+".join((texts[(start, half)], texts[(start + half, half)]))[:200]
            texts[(start, size)] = text
            events.append(
                LineWritten(
                    at_ms=BASE_MS + 10**8, start=start, size=size, text=text, how="glue",
                    first_ms=BASE_MS + start * 3_600_000,
                    last_ms=BASE_MS + (start + size - 1) * 3_600_000,
                )
            )
        size *= 2
    events.append(RowPublished(at_ms=BASE_MS + 10**8, entries=ROW, frontier=31, row_bytes=900))
    return events


def _store(data_dir: Path) -> EventStore:
    store = EventStore(lmdb_kv.open_backend(data_dir))
    store.append(STREAM, _events())
    return store


def test_svg_shows_every_row_line_with_its_address(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _store(data_dir)
    svg_path = tmp_path / "tree.svg"
    assert main(["tree", CHANNEL, "--svg", str(svg_path), "--data", str(data_dir)]) == 0
    assert str(svg_path) in capsys.readouterr().out
    root = ET.parse(svg_path).getroot()
    assert root.tag == f"{SVG}svg"
    row_group = next(g for g in root.iter(f"{SVG}g") if g.get("id") == "row")
    titles = [rect.findtext(f"{SVG}title") or "" for rect in row_group.iter(f"{SVG}rect")]
    assert [t.split()[0] for t in titles] == [format_address(Address(*e)) for e in ROW]
    assert "2025-01-01" in titles[0]
    assert "<&>" in titles[-1]  # escaped in the file, read back whole
    text = svg_path.read_text(encoding="utf-8")
    assert "#friends" in text
    assert "40 messages" in text


def test_json_summary(data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _store(data_dir)
    svg_path = tmp_path / "tree.svg"
    status = main(
        ["tree", f"{STREAM}", "--svg", str(svg_path), "--data", str(data_dir), "--json"]
    )
    assert status == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["channel"] == str(STREAM)
    assert summary["messages"] == 40
    per_level = {entry["level"]: entry["lines"] for entry in summary["lines_per_level"]}
    assert per_level == {0: 40, 1: 16, 2: 8, 3: 4, 4: 2}
    assert summary["lines"] == 70
    assert summary["row"] == [{"address": f"{s}+{n}"} for s, n in ROW]
    assert summary["frontier"] == 31
    assert summary["svg"] == str(svg_path)
    assert summary["svg_bytes"] == svg_path.stat().st_size


def test_unknown_channel_is_a_user_error(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _store(data_dir)
    status = main(["tree", "nope", "--svg", str(tmp_path / "t.svg"), "--data", str(data_dir)])
    assert status == 1
    assert "no channel" in capsys.readouterr().err


def test_a_big_tree_stays_small_and_draws_its_whole_row() -> None:
    leaves = 45_000
    starts = {
        lvl: list(range(0, leaves - (1 << lvl) + 1, 1 << lvl)) for lvl in range(16)
    }
    row_entries = [(0, 32768), (32768, 8192), (40960, 2048), (43008, 1024), (44032, 512)]
    shape = TreeShape(
        title="#big",
        messages=leaves,
        starts=starts,
        row=[RowBox(Address(*e), "model", "2025-01-01..2025-06-30", "x" * 80) for e in row_entries],
        frontier=44544,
        row_bytes=2000,
    )
    assert shape.lines > 89_000
    svg = draw_tree(shape).encode()
    assert len(svg) < 1_000_000
    root = ET.fromstring(svg)
    titles = [t.text or "" for t in root.iter(f"{SVG}title")]
    for start, size in row_entries:
        assert any(t.startswith(f"{start}+{size} ") for t in titles)
