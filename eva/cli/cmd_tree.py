# `eva tree`: draw a channel's tree of lines as an SVG a person can read.
#
# Shell at the edge (it reads the store and writes one file), with the drawing
# itself a pure function from a `TreeShape` to SVG text. The x axis is the
# message index, the y axis the level (leaves at the bottom). Invariants:
# every line of the published row is drawn as its own box with its address in
# a <title>; levels whose boxes would be narrower than MIN_BOX_PX are drawn as
# one density band per level, so the file stays small for any tree size.
from __future__ import annotations

import argparse
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import tzinfo
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

from eva.cli.common import (
    add_channel_argument,
    add_data_option,
    add_json_option,
    find_stream,
    open_store,
    print_json,
)
from eva.core import keys
from eva.core.address import Address, format_address, level
from eva.core.keys import StreamId
from eva.core.render import date_span, flatten_line_breaks
from eva.core.settings import MemorySettings
from eva.memory.view import channel_zone
from eva.store.event_store import EventStore, read_line

PLOT_WIDTH = 1600.0
LEVEL_HEIGHT = 26.0
MIN_BOX_PX = 2.0
BAND_BINS = 400
TITLE_CHARS = 80
_LEFT, _TOP, _RIGHT, _BOTTOM = 200.0, 70.0, 30.0, 110.0


@dataclass(frozen=True, slots=True)
class RowBox:
    """A line of the published row, with what its hover title shows."""

    address: Address
    how: str
    dates: str
    text: str


@dataclass(slots=True)
class TreeShape:
    """Everything the drawing needs: line starts per level, the row, and names."""

    title: str
    messages: int
    starts: dict[int, list[int]] = field(default_factory=dict)
    how: dict[Address, str] = field(default_factory=dict)
    row: list[RowBox] = field(default_factory=list)
    frontier: int = 0
    row_bytes: int = 0

    @property
    def lines(self) -> int:
        return sum(len(starts) for starts in self.starts.values())


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "tree",
        help="draw a channel's tree of lines as an SVG",
        description=(
            "Draw every line of a channel's memory as a box over the messages it covers, "
            "one band per level, leaves at the bottom; the lines of the published row are "
            "highlighted and carry their address, dates and text as a hover title. Low "
            "levels of big trees are drawn as density bands."
        ),
    )
    add_channel_argument(parser)
    parser.add_argument("--svg", type=Path, required=True, help="the SVG file to write")
    add_data_option(parser)
    add_json_option(parser)
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    store = open_store(args.data)
    stream = find_stream(store, args.channel)
    shape = read_tree(store, stream)
    svg = draw_tree(shape).encode("utf-8")
    path: Path = args.svg
    path.write_bytes(svg)
    if args.json:
        print_json(
            {
                "channel": str(stream),
                "title": shape.title,
                "messages": shape.messages,
                "lines": shape.lines,
                "lines_per_level": [
                    {"level": lvl, "size": 1 << lvl, "lines": len(starts)}
                    for lvl, starts in sorted(shape.starts.items())
                ],
                "row": [{"address": format_address(box.address)} for box in shape.row],
                "frontier": shape.frontier,
                "row_bytes": shape.row_bytes,
                "svg": str(path),
                "svg_bytes": len(svg),
            }
        )
    else:
        print(
            f"wrote {path} ({len(svg) / 1024:,.0f} KiB): {shape.messages} messages, "
            f"{shape.lines} lines, row of {len(shape.row)} lines up to message {shape.frontier}"
        )
    return 0


# -- reading -------------------------------------------------------------------


def read_tree(store: EventStore, stream: StreamId) -> TreeShape:
    """The shape of a stream's tree, read in one transaction.

    Only the lines that will be drawn one by one (wide enough, or in the row)
    have their events read; the rest are known by address alone.
    """
    meta = store.meta(stream)
    messages = 0 if meta is None else meta.messages
    zone: tzinfo = channel_zone(meta, MemorySettings())
    shape = TreeShape(title=f"#{meta.channel_name}" if meta else str(stream), messages=messages)
    published = store.published_row(stream)
    prefix = keys.stream_prefix(stream)
    with store.backend.reading() as tables:
        for key, _ in tables.scan("lines", prefix, keys.prefix_end(prefix)):
            start, size = keys.address_of_line_key(key)
            shape.starts.setdefault(level(size), []).append(start)
        for lvl, starts in shape.starts.items():
            if _box_px(1 << lvl, messages) < MIN_BOX_PX:
                continue
            for start in starts:
                line = read_line(tables, stream, start, 1 << lvl)
                if line is not None:
                    shape.how[Address(start, 1 << lvl)] = line.how
        for start, size in () if published is None else published.entries:
            line = read_line(tables, stream, start, size)
            if line is None:
                continue
            text = flatten_line_breaks(line.text)
            shape.row.append(
                RowBox(
                    address=Address(start, size),
                    how=line.how,
                    dates=date_span(line.first_ms, line.last_ms, zone),
                    text=text if len(text) <= TITLE_CHARS else text[: TITLE_CHARS - 1] + "…",
                )
            )
    if published is not None:
        shape.frontier = published.frontier
        shape.row_bytes = published.row_bytes
    return shape


# -- drawing -------------------------------------------------------------------


def _box_px(size: int, messages: int) -> float:
    return size * PLOT_WIDTH / max(messages, 1)


def _num(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


_STYLE = """
text { font-family: sans-serif; font-size: 12px; fill: #222; }
.title { font-size: 16px; font-weight: bold; }
.small { font-size: 10px; fill: #555; }
.grid { stroke: #eee; stroke-width: 1; }
.axis { stroke: #888; stroke-width: 1; }
.frontier { stroke: #c0392b; stroke-width: 1.5; stroke-dasharray: 5 3; }
.verbatim { fill: #dde8f4; stroke: #9fb7d3; stroke-width: 0.5; }
.glue { fill: #dff0dc; stroke: #9cc59a; stroke-width: 0.5; }
.model { fill: #fbe6cc; stroke: #e0b27a; stroke-width: 0.5; }
.band { fill: #7f8c9a; }
.row { fill: #1f5fbf; stroke: #0b2f66; stroke-width: 0.6; }
.row.glue { fill: #2e9a4b; stroke: #134d23; }
.row.model { fill: #e07b00; stroke: #6b3a00; }
"""


def draw_tree(shape: TreeShape) -> str:
    """The SVG text of a tree: title, level bands, line boxes, the row, axis and legend."""
    top_level = max([*shape.starts, *(level(box.address.size) for box in shape.row), 0])
    height = _TOP + (top_level + 1) * LEVEL_HEIGHT + _BOTTOM
    width = _LEFT + PLOT_WIDTH + _RIGHT
    scale = PLOT_WIDTH / max(shape.messages, 1)

    def y_of(lvl: int) -> float:
        return _TOP + (top_level - lvl) * LEVEL_HEIGHT

    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{_num(width)}" '
        f'height="{_num(height)}" viewBox="0 0 {_num(width)} {_num(height)}">',
        f"<style>{_STYLE}</style>",
        f'<rect width="{_num(width)}" height="{_num(height)}" fill="#fff"/>',
        _title(shape),
        '<g id="levels">',
    ]
    for lvl in range(top_level + 1):
        y = y_of(lvl)
        count = len(shape.starts.get(lvl, ()))
        parts.append(
            f'<line class="grid" x1="{_num(_LEFT)}" y1="{_num(y)}" '
            f'x2="{_num(_LEFT + PLOT_WIDTH)}" y2="{_num(y)}"/>'
            f'<text x="8" y="{_num(y + LEVEL_HEIGHT * 0.65)}">level {lvl} '
            f'<tspan class="small">size {1 << lvl}, {count} line{"" if count == 1 else "s"}</tspan>'
            "</text>"
        )
    parts.append('</g>\n<g id="lines">')
    in_row = {box.address for box in shape.row}
    for lvl, starts in sorted(shape.starts.items()):
        size = 1 << lvl
        box_y = _num(y_of(lvl) + 3)
        h = _num(LEVEL_HEIGHT - 6)
        if _box_px(size, shape.messages) < MIN_BOX_PX:
            parts.extend(_band(starts, size, shape.messages, box_y, h))
            continue
        for start in starts:
            address = Address(start, size)
            if address in in_row:
                continue
            how = shape.how.get(address, "verbatim")
            parts.append(
                f'<rect class="{how}" x="{_num(_LEFT + start * scale)}" y="{box_y}" '
                f'width="{_num(size * scale)}" height="{h}">'
                f"<title>{format_address(address)} {how}</title></rect>"
            )
    parts.append('</g>\n<g id="row">')
    for box in shape.row:
        start, size = box.address
        tip = f"{format_address(box.address)} {box.dates} ({box.how})\n{box.text}"
        parts.append(
            f'<rect class="row {box.how}" x="{_num(_LEFT + start * scale)}" '
            f'y="{_num(y_of(level(size)) + 1)}" width="{_num(max(size * scale, 1.0))}" '
            f'height="{_num(LEVEL_HEIGHT - 2)}"><title>{escape(tip)}</title></rect>'
        )
    parts.append("</g>")
    parts.extend(_axis(shape, y_of(0) + LEVEL_HEIGHT, y_of(top_level)))
    parts.extend(_legend(height - 40))
    parts.append("</svg>\n")
    return "\n".join(parts)


def _title(shape: TreeShape) -> str:
    row_kib = f"{shape.row_bytes / 1024:,.1f} KiB" if shape.row_bytes else "no size recorded"
    summary = (
        f"{shape.messages} messages, {shape.lines} lines; row: {len(shape.row)} lines "
        f"covering messages 0..{shape.frontier - 1} ({row_kib})"
        if shape.row
        else f"{shape.messages} messages, {shape.lines} lines; no row published"
    )
    return (
        f'<text class="title" x="{_num(_LEFT)}" y="28">{escape(shape.title)}</text>'
        f'<text x="{_num(_LEFT)}" y="50">{escape(summary)}</text>'
    )


def _band(starts: list[int], size: int, messages: int, y: str, h: str) -> Iterable[str]:
    """One level drawn as shaded spans: darker where more of the messages have this line."""
    bins = max(1, min(BAND_BINS, messages))
    covered = [0.0] * bins
    per_bin = messages / bins
    for start in starts:
        first, end = float(start), float(start + size)
        b = int(first / per_bin)
        while b < bins and first < end:
            edge = min(end, (b + 1) * per_bin)
            covered[b] += edge - first
            first, b = edge, b + 1
    shades = [0 if c <= 0 else max(1, min(10, math.ceil(10 * c / per_bin))) for c in covered]
    run_start = 0
    for b in range(1, bins + 1):
        if b < bins and shades[b] == shades[run_start]:
            continue
        if shades[run_start]:
            x = _LEFT + run_start * PLOT_WIDTH / bins
            w = (b - run_start) * PLOT_WIDTH / bins
            yield (
                f'<rect class="band" x="{_num(x)}" y="{y}" width="{_num(w)}" height="{h}" '
                f'fill-opacity="{_num(0.1 + 0.06 * shades[run_start])}"/>'
            )
        run_start = b


def _axis(shape: TreeShape, y: float, y_top: float) -> Iterable[str]:
    yield f'<g id="axis"><line class="axis" x1="{_num(_LEFT)}" y1="{_num(y)}" ' + (
        f'x2="{_num(_LEFT + PLOT_WIDTH)}" y2="{_num(y)}"/>'
    )
    messages = max(shape.messages, 1)
    step = next(
        m * 10**p for p in range(20) for m in (1, 2, 5) if messages / (m * 10**p) <= 10
    )
    scale = PLOT_WIDTH / messages
    for index in range(0, messages + 1, step):
        x = _num(_LEFT + index * scale)
        yield (
            f'<line class="axis" x1="{x}" y1="{_num(y)}" x2="{x}" y2="{_num(y + 5)}"/>'
            f'<text x="{x}" y="{_num(y + 18)}" text-anchor="middle">{index}</text>'
        )
    yield (
        f'<text x="{_num(_LEFT + PLOT_WIDTH / 2)}" y="{_num(y + 36)}" '
        'text-anchor="middle">message index</text>'
    )
    if shape.row:
        x = _num(_LEFT + shape.frontier * scale)
        yield (
            f'<line class="frontier" x1="{x}" y1="{_num(y_top)}" x2="{x}" y2="{_num(y)}">'
            f"<title>frontier: the row covers messages before {shape.frontier}; "
            "the tail starts here</title></line>"
        )
    yield "</g>"


def _legend(y: float) -> Iterable[str]:
    entries = [
        ("row verbatim", "row verbatim"),
        ("row glue", "row glue"),
        ("row model", "row model"),
        ("verbatim", "line (verbatim)"),
        ("glue", "line (glue)"),
        ("model", "line (model)"),
        ("band", "many narrow lines (darker: more covered)"),
    ]
    yield '<g id="legend">'
    x = _LEFT
    for css, label in entries:
        yield (
            f'<rect class={quoteattr(css)} x="{_num(x)}" y="{_num(y)}" width="16" height="12"/>'
            f'<text x="{_num(x + 22)}" y="{_num(y + 10)}">{escape(label)}</text>'
        )
        x += 40 + 7 * len(label)
    yield (
        f'<line class="frontier" x1="{_num(x)}" y1="{_num(y - 2)}" x2="{_num(x)}" '
        f'y2="{_num(y + 14)}"/><text x="{_num(x + 8)}" y="{_num(y + 10)}">frontier</text>'
    )
    yield "</g>"
