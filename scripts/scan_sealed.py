"""What of a channel's words a sealed data directory still holds in the clear.

Reads the shared sample in place (never copied), adds messages of three planted people
(names and words found nowhere else), imports it and builds its memory with the offline
summarizer, in a temporary directory with a key store of its own. Then it looks for each
planted name and word, and for 200 long words sampled from the channel, in every byte of
every file of the data directory, and says which table holds the ones it finds. The last
line printed is one JSON object.

    python scripts/scan_sealed.py [--export PATH] [--words N]
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

import lmdb

from eva.cli.cmd_import import import_bytes
from eva.cli.main import main as eva
from eva.core.keys import ALL_TABLES
from eva.store.key_binding import key_store_at
from eva.store.lmdb_kv import open_backend

SAMPLE = Path(__file__).resolve().parents[2] / "shared" / "data" / "komodo-talk-general.dce.json.gz"
PLANTED = ("Zyqolandra", "Vexmirtoba", "Quorlathin")
"""The planted people: each writes messages holding words of their own."""


def planted_words(person: str) -> list[str]:
    return [f"{person.lower()}secret{n}" for n in range(5)]


PLANTED_AT = 1000
"""Where in the channel the planted messages go: early, so the recall index holds them."""


def with_planted(export: dict[str, Any]) -> dict[str, Any]:
    """The export with messages of the planted people put in after message `PLANTED_AT`
    (ids one past it, so the order holds)."""
    messages = export["messages"]
    before = messages[PLANTED_AT]
    added = []
    for number, person in enumerate(PLANTED):
        for word in planted_words(person):
            planted = json.loads(json.dumps(before))
            planted["id"] = str(int(before["id"]) + 1 + len(added))
            planted["author"] = {
                **before["author"], "id": str(900_000_000_000 + number), "name": person,
                "nickname": person, "isBot": False,
            }
            planted["content"] = f"{word} is what {person} said"
            planted["attachments"] = []
            planted.pop("reference", None)
            added.append(planted)
    messages[PLANTED_AT + 1 : PLANTED_AT + 1] = added
    return export


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--export", type=Path, default=SAMPLE)
    parser.add_argument("--words", type=int, default=200)
    args = parser.parse_args()
    if not args.export.exists():
        print(f"no sample at {args.export}; nothing to measure", file=sys.stderr)
        return 0
    raw = args.export.read_bytes()
    export = json.loads(gzip.decompress(raw) if args.export.suffix == ".gz" else raw)
    long_words = sorted({
        word
        for message in export["messages"]
        for word in re.findall(r"[A-Za-z]{10,}", message.get("content", ""))
    })
    sampled = random.Random(7).sample(long_words, min(args.words, len(long_words)))
    planted = [  # their names as written and as the index folds them, and their words
        *PLANTED, *(p.lower() for p in PLANTED),
        *(word for person in PLANTED for word in planted_words(person)),
    ]
    with (
        tempfile.TemporaryDirectory(prefix="eva-scan-sealed-") as tmp,
        tempfile.TemporaryDirectory() as keys,
        key_store_at(Path(keys) / "keys"),  # never the operator's key store
    ):
        data = Path(tmp) / "data"
        import_bytes(data, json.dumps(with_planted(export)).encode(), Path("planted.json"))
        if eva(["build", "--data", str(data)]) != 0:
            return 1
        open_backend(data).close()
        blob = b"".join(path.read_bytes() for path in data.rglob("*") if path.is_file())
        found_planted = [w for w in planted if w.encode() in blob]
        found_sampled = [w for w in sampled if w.encode() in blob]
        where = _tables_holding(data, [*found_planted, *found_sampled])
    summary = {
        "planted_words": len(planted),
        "planted_found": len(found_planted),
        "sampled_words": len(sampled),
        "sampled_found": len(found_sampled),
        "found_in_tables": where,
        "key_store_outside": True,
    }
    print(json.dumps(summary))
    return 0


def _tables_holding(data: Path, words: list[str]) -> dict[str, int]:
    """How many of `words` each table of the directory holds, in its keys or values."""
    counts: dict[str, int] = {}
    env = lmdb.open(str(data), readonly=True, lock=False, max_dbs=64)
    try:
        with env.begin() as txn:
            for table in ALL_TABLES:
                if txn.get(table.encode()) is None:
                    continue
                db = env.open_db(table.encode(), txn=txn)
                held = b"\n".join(key + b"\x00" + value for key, value in txn.cursor(db=db))
                hits = sum(word.encode() in held for word in words)
                if hits:
                    counts[table] = hits
    finally:
        env.close()
    return counts


if __name__ == "__main__":
    sys.exit(main())
