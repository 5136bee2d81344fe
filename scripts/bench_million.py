"""A channel of about a million messages: import, build and replay, their time and peak memory.

The channel is the shared sample (../shared/data/komodo-talk-general.dce.json.gz,
read in place) written out `--repeat` times into one export, each copy with
its message ids and times shifted past the one before, so it reads as one
long channel with real message lengths. Each step runs as its own `eva`
process, as an operator would run it; its peak memory is that process's
maximum resident size, or, where more, the most that it and its children
(a replay's child rebuilding the recall index) held at once, summed. (The
export is written by a child process of its own: Linux counts in a child's
maximum resident size what its parent held when it forked, so this process
keeps small.) Beside it, sampled every 20 ms from /proc (Linux), the most it
held of its own (anonymous) memory and of mapped file pages: the
latter are the data file's pages in the kernel's cache, which a read maps and
the kernel takes back when it needs them. The last line printed is a JSON
object.

    python scripts/bench_million.py [--repeat 22] [--keep DIR] [--reshard]

With --reshard, the channel is then moved by `eva reshard` to the directory of
the shard that owns it among two new ones (copied, replayed there and
compared, removed and compacted away in the old one): its time and peak
memory are reported apart from the three steps'.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = ROOT.parent / "shared" / "data" / "komodo-talk-general.dce.json.gz"
# Targets of the scaling issue: each step under 500 MB, the three under two minutes.
PEAK_MB = 500
TOTAL_S = 120


def write_export(target: Path, repeat: int) -> int:
    """The sample `repeat` times over as one export at `target`; returns its messages."""
    with gzip.open(SAMPLE, "rb") as file:
        export = json.loads(file.read())
    messages: list[dict[str, Any]] = export.pop("messages")
    first = _ms(messages[0]["timestamp"])
    span = _ms(messages[-1]["timestamp"]) - first + 60_000
    id_step = max(int(m["id"]) for m in messages) - min(int(m["id"]) for m in messages) + 1
    count = 0
    with target.open("w", encoding="utf-8") as out:
        head = json.dumps({**export, "messageCount": len(messages) * repeat})
        out.write(head[:-1] + ', "messages": [\n')
        for copy in range(repeat):
            for message in messages:
                shifted = dict(message)
                shifted["id"] = str(int(message["id"]) + copy * id_step)
                shifted["timestamp"] = _stamp(_ms(message["timestamp"]) + copy * span)
                shifted["timestampEdited"] = None
                reference = message.get("reference")
                if reference and reference.get("messageId"):
                    moved = int(reference["messageId"]) + copy * id_step
                    shifted["reference"] = {**reference, "messageId": str(moved)}
                out.write(("" if count == 0 else ",\n") + json.dumps(shifted))
                count += 1
        out.write("\n]}\n")
    return count


def _write_export_apart(target: Path, repeat: int) -> int:
    """`write_export` in a child process, so that what it loads is never this process's."""
    argv = [sys.executable, __file__, "--repeat", str(repeat), "--write-export", str(target)]
    written = subprocess.run(argv, check=True, capture_output=True, text=True)
    return int(written.stdout.split()[-1])


def _ms(stamp: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(stamp).timestamp() * 1000)


def _stamp(at_ms: int) -> str:
    from datetime import UTC, datetime

    moment = datetime.fromtimestamp(at_ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds")


def run_step(name: str, argv: list[str]) -> dict[str, float]:
    """Run one `eva` command; its wall time, its peak resident memory, and the most of it
    that was its own and that was mapped file pages (sampled)."""
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "eva", *argv], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    sampled = {"RssAnon": 0, "RssFile": 0}
    done = threading.Event()
    sampler = threading.Thread(target=_sample, args=(child.pid, sampled, done), daemon=True)
    sampler.start()
    _, status, usage = os.wait4(child.pid, 0)
    done.set()
    sampler.join()
    seconds = time.perf_counter() - started
    if status != 0:
        stderr = child.stderr.read().decode() if child.stderr else ""
        raise SystemExit(f"eva {name} failed: {stderr.strip()[-2000:]}")
    anon_mb, file_mb = sampled["RssAnon"] / 1024, sampled["RssFile"] / 1024
    # kilobytes on Linux; a step with a child counts both, as sampled
    peak_mb = max(usage.ru_maxrss / 1024, anon_mb + file_mb)
    print(
        f"{name:<7} {seconds:7.1f} s  peak {peak_mb:7.0f} MB  "
        f"(own {anon_mb:5.0f} MB, mapped file {file_mb:5.0f} MB)",
        flush=True,
    )
    return {
        "seconds": round(seconds, 2),
        "peak_mb": round(peak_mb),
        "own_mb": round(anon_mb),
        "file_mb": round(file_mb),
    }


def _sample(pid: int, peaks: dict[str, int], done: threading.Event) -> None:
    """The highest RssAnon and RssFile (kB) of process `pid` and the children it has then
    (a replay's child rebuilding the recall index), summed, until `done`."""
    while not done.wait(0.02):
        now = dict.fromkeys(peaks, 0)
        try:
            for member in [pid, *_children(pid)]:
                with open(f"/proc/{member}/status") as status:
                    for line in status:
                        field, _, value = line.partition(":")
                        if field in now:
                            now[field] += int(value.split()[0])
        except FileNotFoundError:  # a child just ended: the next sample counts again
            continue
        except (OSError, ValueError):  # gone, or not Linux
            return
        for field, value in now.items():
            peaks[field] = max(peaks[field], value)


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as listed:
            return [int(child) for child in listed.read().split()]
    except (OSError, ValueError):
        return []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=22, help="copies of the sample (22: ~1M)")
    parser.add_argument("--keep", type=Path, help="work in DIR and leave it there")
    parser.add_argument(
        "--reshard", action="store_true", help="then move the channel to another directory"
    )
    parser.add_argument("--write-export", type=Path, help=argparse.SUPPRESS)  # the child's part
    args = parser.parse_args()
    if args.write_export is not None:
        print(write_export(args.write_export, args.repeat))
        return 0
    if not SAMPLE.exists():
        print(f"the shared sample is absent ({SAMPLE}); nothing to measure")
        return 0
    with tempfile.TemporaryDirectory() as scratch:
        work = args.keep or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        export, data = work / "million.json", work / "data"
        os.environ["EVA_KEYS"] = str(work / "keys")  # the steps' key store: never the operator's
        os.environ.pop("EVA_MASTER_KEY", None)
        started = time.perf_counter()
        messages = _write_export_apart(export, args.repeat)
        print(f"export of {messages:,} messages written in {time.perf_counter() - started:.0f} s")
        steps = {
            "import": run_step("import", ["import", str(export), "--data", str(data), "--quiet"]),
            "build": run_step("build", ["build", "--data", str(data)]),
            "replay": run_step("replay", ["replay", "--data", str(data)]),
        }
        total = sum(step["seconds"] for step in steps.values())
        peak = max(step["peak_mb"] for step in steps.values())
        disk_mb = sum(f.stat().st_size for f in data.iterdir() if f.is_file()) / 1e6
        print(
            f"total {total:.0f} s (target {TOTAL_S}), highest peak {peak:.0f} MB "
            f"(target {PEAK_MB}), data directory {disk_mb:.0f} MB"
        )
        figures = {"messages": messages, **steps, "total_s": round(total, 1)}
        if args.reshard:
            shards = [str(work / f"shard-{i}") for i in range(2)]
            figures["reshard"] = run_step(
                "reshard", ["reshard", "--shard-count", "2", *shards, "--from", str(data)]
            )
        print(json.dumps(figures | {"disk_mb": round(disk_mb)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
