# A bar chart of dollars a day, as SVG text.
#
# Pure: handed the amounts by day (days since the Unix epoch, UTC), returns the
# SVG document; the caller writes it. Invariants: every day of the span gets a
# slot, days without spend included; the scale starts at zero.
from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from html import escape

WIDTH = 960
HEIGHT = 320
LEFT, RIGHT, TOP, BOTTOM = 64, 16, 36, 40


def _day_label(day: int) -> str:
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(days=day)).strftime("%Y-%m-%d")


def daily_usd_svg(usd_by_day: Mapping[int, float], title: str) -> str:
    """Bars of dollars a day over the span of `usd_by_day`, with the title on top."""
    if usd_by_day:
        first, last = min(usd_by_day), max(usd_by_day)
    else:
        first = last = 0
    days = last - first + 1
    top = max(usd_by_day.values(), default=0.0) or 1.0
    plot_w = WIDTH - LEFT - RIGHT
    plot_h = HEIGHT - TOP - BOTTOM
    bar_w = plot_w / days
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="11">',
        f'<rect width="{WIDTH}" height="{HEIGHT}" fill="white"/>',
        f'<text x="{LEFT}" y="20" font-size="13">{escape(title)}</text>',
    ]
    for step in range(5):
        value = top * step / 4
        y = TOP + plot_h - plot_h * step / 4
        parts.append(
            f'<line x1="{LEFT}" y1="{y:.1f}" x2="{WIDTH - RIGHT}" y2="{y:.1f}" stroke="#ddd"/>'
        )
        parts.append(
            f'<text x="{LEFT - 6}" y="{y + 4:.1f}" text-anchor="end">${value:.3f}</text>'
        )
    for day, usd in sorted(usd_by_day.items()):
        height = plot_h * usd / top
        x = LEFT + (day - first) * bar_w
        parts.append(
            f'<rect x="{x:.2f}" y="{TOP + plot_h - height:.2f}" width="{max(bar_w, 0.5):.2f}" '
            f'height="{height:.2f}" fill="#4a7bd0"><title>{_day_label(day)}: '
            f"${usd:.4f}</title></rect>"
        )
    ticks = min(days, 8)
    for tick in range(ticks):
        day = first + round(tick * (days - 1) / max(ticks - 1, 1))
        x = LEFT + (day - first + 0.5) * bar_w
        parts.append(
            f'<text x="{x:.1f}" y="{HEIGHT - BOTTOM + 16}" text-anchor="middle">'
            f"{_day_label(day)}</text>"
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"
