# Eva's tools as the reply path runs them: zoom, recall and date, on one channel only.
#
# Shell: each call is answered by the channel's actor (`Supervisor.ask`). It may
# not know any channel but the one it is handed: no tool takes a channel, guild
# or person id, and an argument a tool does not take is an error the model reads.
from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime

from eva.core.address import parse_address
from eva.core.keys import StreamId
from eva.core.recall import RecallView, render_view
from eva.live.inputs import DateOf, Recall, Zoom
from eva.live.supervisor import Supervisor
from eva.memory.view import Zoomed, ZoomError
from eva.model.prompts import DATE_PATTERN

RECALL_TOOL_BYTES = 6000


@dataclass(frozen=True, slots=True)
class ToolAnswer:
    """A tool's result as the model reads it."""

    text: str
    is_error: bool = False
    verbatim: bool = True
    """Whether it gives people's own words (a whole message, recall's hits, a date) rather
    than summary lines (a zoom into a line's halves)."""


class _BadArguments(ValueError):
    pass


def _arguments(
    name: str, given: object, required: frozenset[str], optional: frozenset[str]
) -> dict[str, object]:
    if not isinstance(given, dict):
        raise _BadArguments(f"{name} takes a JSON object of arguments")
    unknown = sorted(str(key) for key in given if key not in required | optional)
    if unknown:
        takes = ", ".join(sorted(required | optional))
        raise _BadArguments(
            f"{name} takes only {takes}, not {', '.join(unknown)}; "
            "tools only ever read this channel"
        )
    missing = sorted(required - given.keys())
    if missing:
        raise _BadArguments(f"{name} needs {', '.join(missing)}")
    return {str(key): value for key, value in given.items()}


def _text(name: str, value: object, what: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _BadArguments(f"{name}: {what} must be a non-empty string")
    return value


def _whole(name: str, value: object, what: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise _BadArguments(f"{name}: {what} must be a whole number of at least {least}")
    return value


def _day(name: str, value: object, what: str) -> str | None:
    if value is None:
        return None
    text = _text(name, value, what)
    try:
        parsed = date.fromisoformat(text)
    except ValueError:
        parsed = None
    if parsed is None or len(text) != 10:
        raise _BadArguments(f"{name}: {what} must be a date YYYY-MM-DD ({DATE_PATTERN})")
    return text


def _filter_note(person: str | None, after: str | None, before: str | None) -> str:
    parts = []
    if person is not None:
        parts.append(f"by {person}")
    if after is not None:
        parts.append(f"from {after}")
    if before is not None:
        parts.append(f"before {before}")
    return f"(searched only the messages {', '.join(parts)})"


async def run_tool(
    supervisor: Supervisor, stream: StreamId, name: str, arguments: object
) -> ToolAnswer:
    """Answer one tool call of the model, reading channel `stream` and nothing else."""
    try:
        return await _run_tool(supervisor, stream, name, arguments)
    except _BadArguments as error:
        return ToolAnswer(str(error), is_error=True)
    except ZoomError as error:
        return ToolAnswer(str(error), is_error=True)


async def _run_tool(
    supervisor: Supervisor, stream: StreamId, name: str, arguments: object
) -> ToolAnswer:
    match name:
        case "zoom":
            args = _arguments(name, arguments, frozenset({"address"}), frozenset({"page"}))
            address = _text(name, args["address"], "address").strip()
            try:
                size = parse_address(address).size
            except ValueError as error:
                raise _BadArguments(f"zoom: {error}") from None
            page = _whole(name, args.get("page", 1), "page", 1)
            zoomed = await supervisor.ask(stream, Zoom(address=address, page=page))
            assert isinstance(zoomed, Zoomed)
            return ToolAnswer(zoomed.text, verbatim=size == 1)
        case "recall":
            args = _arguments(
                name, arguments, frozenset({"query"}), frozenset({"person", "after", "before"})
            )
            query = _text(name, args["query"], "query")
            person = args.get("person")
            who = None if person is None else _text(name, person, "person")
            after = _day(name, args.get("after"), "after")
            before = _day(name, args.get("before"), "before")
            asked = Recall(query=query, person=who, after=after, before=before)
            view = await supervisor.ask(stream, asked)
            assert isinstance(view, RecallView)
            if who is None and after is None and before is None:
                return ToolAnswer(render_view(view, RECALL_TOOL_BYTES))
            note = _filter_note(who, after, before)
            return ToolAnswer(f"{note}\n{render_view(view, RECALL_TOOL_BYTES)}")
        case "date":
            args = _arguments(name, arguments, frozenset({"index"}), frozenset())
            index = _whole(name, args["index"], "index", 0)
            at_ms = await supervisor.ask(stream, DateOf(index=index))
            if at_ms is None:
                return ToolAnswer(f"no message {index}")
            assert isinstance(at_ms, int)
            posted = datetime.fromtimestamp(at_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%MZ")
            return ToolAnswer(f"message {index} was posted {posted}")
        case _:
            return ToolAnswer(
                f"there is no tool {name[:64]!r}; the tools are zoom, recall and date",
                is_error=True,
            )
