# Writes schemas/events.schema.json: the JSON Schema of the event union, from the Structs.
#
# The file is generated, never edited by hand: `msgspec.json.schema(AnyEvent)`,
# pretty-printed with sorted keys and a trailing newline, so the same code
# always gives the same bytes. `--check` writes nothing and exits 1 when the
# file differs from the code (for CI and the test suite).
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import msgspec

from eva.core.events import AnyEvent

SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "events.schema.json"


def schema_text() -> str:
    """The schema file's text as the code defines it now."""
    schema = msgspec.json.schema(AnyEvent)
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Write schemas/events.schema.json from the event Structs."
    )
    parser.add_argument(
        "--check", action="store_true", help="exit 1 if the file differs from the code"
    )
    parser.add_argument("--path", type=Path, default=SCHEMA_PATH, help="the schema file")
    args = parser.parse_args(argv)
    wanted = schema_text()
    if args.check:
        try:
            current = args.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            current = None
        if current != wanted:
            state = "is missing" if current is None else "differs from the event Structs"
            print(
                f"{args.path} {state}; run `python scripts/gen_schema.py` to regenerate it",
                file=sys.stderr,
            )
            return 1
        print(f"{args.path} is up to date")
        return 0
    args.path.parent.mkdir(parents=True, exist_ok=True)
    args.path.write_text(wanted, encoding="utf-8")
    print(f"wrote {args.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
