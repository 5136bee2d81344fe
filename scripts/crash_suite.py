"""Kill every writing command with SIGKILL at random points, and check what each leaves.

For each command (import, build, forget, replay --repair, serve-local, the bot under
the fake Discord, and the bot killed while people delete messages) the suite makes
the data directory the command starts from, runs the command once to the end for
reference and to learn how long it takes, then runs it again and again on fresh
copies, each killed after a random part of that time.
After each kill it does what an operator would (runs the command again, or for a
forget any command that writes, or restarts the bot) and checks:

- every event of every channel decodes, the log's seals hold, and the projections
  equal a rebuild from the log (`replay_stream`);
- no message is stored twice, and message indexes have no gap;
- nothing acknowledged is lost: an acknowledged stdin line of serve-local, a message
  Discord delivered to the bot, a forget whose "forget recorded" was printed (its
  person's words are then gone from every file once anything wrote again);
- the end state equals the uninterrupted run's: every message with its author and
  text, and the published row's lines;
- a message the log says was deleted leaves no word in any file once the bot is
  started again, though the kill came long before its purge was due.

    python scripts/crash_suite.py [--runs 200] [--seed 1] [--only import,build,...]

Prints one line per command and, last, one JSON object with the outcomes. Exits 1 if
any run found a problem. Runs on the demo chat; reads nothing outside the project.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from eva.core.address import Address
from eva.core.events import MessagePosted
from eva.core.keys import StreamId
from eva.demo.friends import friends_export
from eva.store.erasure import prove_erased
from eva.store.event_store import EventStore
from eva.store.key_binding import bind
from eva.store.key_store import open_key_store
from eva.store.lmdb_kv import open_backend
from eva.store.replay import replay_stream

ROOT = Path(__file__).resolve().parents[1]
MESSAGES = 1200
SMALL = (
    "[memory]\ncompress_at_bytes = 8192\ntail_keep_bytes = 2048\n"
    "row_high_bytes = 8192\nrow_low_bytes = 4096\nquiet_ms = 200\n"
)
SHARES = {
    "import": 40, "build": 35, "forget": 35, "repair": 30, "serve-local": 40, "bot": 20,
    "delete": 15,
}
COMMAND_TIMEOUT_S = 120


def eva_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "eva.cli.main", *args]


def child_env(**extra: str) -> dict[str, str]:
    paths = [str(ROOT), os.environ.get("PYTHONPATH", "")]
    env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
    return {**env, "PYTHONPATH": os.pathsep.join(p for p in paths if p), **extra}


def run_eva(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    done = subprocess.run(
        eva_argv(*args), input=stdin, capture_output=True, env=child_env(),
        timeout=COMMAND_TIMEOUT_S, check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"eva {' '.join(args)} exited {done.returncode}: {done.stderr[-400:]!r}")
    return done


def kill_after(clean_s: float, rng: random.Random) -> float:
    """When to kill a run whose uninterrupted twin took `clean_s` (most of that is the
    interpreter starting, so most kills fall in the later part)."""
    return clean_s * rng.uniform(0.2, 1.0)


def killed_run(
    argv: list[str], after_s: float, stdin: bytes | None = None, after_line: bytes = b""
) -> tuple[bool, bytes]:
    """Run `argv`, SIGKILL it after `after_s` (counted from when it printed a line starting
    with `after_line`, if given); whether it was still running, and its stdout."""
    child = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env=child_env(),
    )
    assert child.stdin is not None
    assert child.stdout is not None
    try:
        if stdin:
            child.stdin.write(stdin)
        child.stdin.close()
    except BrokenPipeError:
        pass
    first = b""
    if after_line:
        first = child.stdout.readline()
    try:
        child.wait(after_s)
        killed = False
    except subprocess.TimeoutExpired:
        child.send_signal(signal.SIGKILL)
        child.wait()
        killed = True
    out = first + child.stdout.read()
    child.stdout.close()
    return killed, out


# -- what a data directory holds ----------------------------------------------------


@contextmanager
def opened(data: Path) -> Iterator[EventStore]:
    """The directory's store, with the key store it is bound to (its words are sealed)."""
    try:
        store = EventStore(open_backend(data))
        bind(store, open_key_store(), write=False)
        yield store
    finally:
        open_backend(data).close()


def end_state(data: Path) -> dict[str, Any]:
    """Every channel's messages (id, author, text, erased) and its published row's lines."""
    state: dict[str, Any] = {}
    with opened(data) as store:
        for meta in store.streams():
            stream = StreamId(meta.guild_id, meta.channel_id)
            messages = [
                (m.posted.message_id, m.posted.author_id, m.content, m.deleted)
                for _, m in store.messages(stream, 0, meta.messages)
            ]
            row = store.published_row(stream)
            lines: list[str] = []
            if row is not None:
                addresses = [Address(start, size) for start, size in row.entries]
                found = store.lines(stream, addresses)
                lines = [found[a].text if a in found else "?" for a in addresses]
            state[str(stream)] = {"messages": messages, "row": lines}
    return state


def soundness(data: Path) -> list[str]:
    """What is wrong with the data directory as a log: replay, seals, duplicates, gaps."""
    problems: list[str] = []
    with opened(data) as store:
        for meta in store.streams():
            stream = StreamId(meta.guild_id, meta.channel_id)
            result = replay_stream(store, stream)
            if not result.ok:
                log = result.log
                why = result.damaged or (log.broken.why if log and log.broken else "")
                problems.append(f"{stream}: replay differs {result.differing} {why}")
            ids: Counter[int] = Counter()
            indexes = []
            for _, event in store.events(stream):
                if isinstance(event, MessagePosted):
                    ids[event.message_id] += 1
                    indexes.append(event.index)
            twice = [i for i, n in ids.items() if n > 1]
            if twice:
                problems.append(f"{stream}: {len(twice)} messages stored twice")
            if indexes != list(range(len(indexes))):
                problems.append(f"{stream}: message indexes have a gap or repeat")
    return problems


# -- the runs -----------------------------------------------------------------------


@dataclass
class Outcome:
    runs: int = 0
    killed: int = 0  # still running when killed
    finished_first: int = 0  # done before the kill came
    acknowledged: int = 0  # items acknowledged before the kill (lines, messages, forgets)
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0


@dataclass
class World:
    root: Path
    export: Path
    settings: Path
    person: int  # the one the forget runs forget
    person_texts: list[str]
    imported: Path = field(init=False)
    built: Path = field(init=False)


def make_world(root: Path) -> World:
    # a key store of the suite's own: its forgets destroy people's keys
    os.environ["EVA_KEYS"] = str(root / "keys")
    os.environ.pop("EVA_MASTER_KEY", None)
    export = root / "friends.json"
    raw = friends_export(MESSAGES)
    export.write_bytes(raw)
    settings = root / "small.toml"
    settings.write_text(SMALL)
    messages = json.loads(raw)["messages"]
    authors = Counter(m["author"]["id"] for m in messages if not m["author"].get("isBot"))
    person = int(authors.most_common(3)[-1][0])
    texts = [m["content"] for m in messages if int(m["author"]["id"]) == person]
    world = World(root, export, settings, person, texts)
    world.imported = root / "imported"
    run_eva("import", str(export), "--data", str(world.imported), "--quiet")
    world.built = root / "built"
    shutil.copytree(world.imported, world.built)
    run_eva("build", "--data", str(world.built), "--settings", str(settings))
    return world


def fresh(source: Path | None, target: Path) -> Path:
    shutil.rmtree(target, ignore_errors=True)
    if source is not None:
        shutil.copytree(source, target)
    return target


@contextmanager
def own_keys(world: World, target: Path) -> Iterator[None]:
    """The commands run inside use a copy of the suite's key store made at `target`: a
    forget destroys the person's keys, and every copy of the built directory shares them."""
    base = os.environ["EVA_KEYS"]
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(world.root / "keys", target)
    os.environ["EVA_KEYS"] = str(target)
    try:
        yield
    finally:
        os.environ["EVA_KEYS"] = base


def timed(work: Callable[[], object]) -> float:
    started = time.perf_counter()
    work()
    return time.perf_counter() - started


def suite_rerun(
    world: World, name: str, start: Path | None, args: Callable[[Path], list[str]],
    runs: int, rng: random.Random, prepare: Callable[[Path], None] | None = None,
) -> Outcome:
    """Kill a command that is simply run again after a crash (import, build, repair)."""
    outcome = Outcome()
    reference = fresh(start, world.root / f"{name}-reference")
    if prepare is not None:
        prepare(reference)
    clean_s = timed(lambda: run_eva(*args(reference)))
    expected = end_state(reference)
    for run in range(runs):
        data = fresh(start, world.root / f"{name}-{run}")
        if prepare is not None:
            prepare(data)
        killed, _ = killed_run(eva_argv(*args(data)), kill_after(clean_s, rng))
        outcome.runs += 1
        outcome.killed += killed
        outcome.finished_first += not killed
        run_eva(*args(data))
        found = soundness(data)
        if end_state(data) != expected:
            found.append("the end state differs from the uninterrupted run's")
        outcome.problems.extend(f"{name} run {run}: {p}" for p in found)
        shutil.rmtree(data, ignore_errors=True)
    return outcome


def suite_forget(world: World, runs: int, rng: random.Random) -> Outcome:
    """Kill `eva forget`; a promise printed must be kept by the next command that writes."""
    outcome = Outcome()
    user = str(world.person)
    reference = fresh(world.built, world.root / "forget-reference")
    with own_keys(world, world.root / "forget-reference-keys"):
        clean_s = timed(lambda: run_eva("forget", "--user", user, "--data", str(reference)))
        expected = end_state(reference)
    for run in range(runs):
        with own_keys(world, world.root / f"forget-{run}-keys"):
            _forget_run(world, run, user, clean_s, expected, outcome, rng)
    return outcome


def _forget_run(
    world: World, run: int, user: str, clean_s: float, expected: dict[str, Any],
    outcome: Outcome, rng: random.Random,
) -> None:
    """One run of `suite_forget`: killed, finished by the next command that writes, checked."""
    data = fresh(world.built, world.root / f"forget-{run}")
    argv = eva_argv("forget", "--user", user, "--data", str(data))
    if run % 2:  # half the runs are killed after the promise, while it erases
        killed, out = killed_run(
            argv, rng.uniform(0.0, clean_s / 3), after_line=b"forget recorded"
        )
    else:
        killed, out = killed_run(argv, kill_after(clean_s, rng))
    outcome.runs += 1
    outcome.killed += killed
    outcome.finished_first += not killed
    promised = b"forget recorded" in out
    outcome.acknowledged += promised
    # any command that writes finishes a recorded forget by itself
    run_eva("build", "--data", str(data), "--settings", str(world.settings))
    if promised:
        with opened(data) as store:
            scan = prove_erased(store, data, world.person_texts)
        if scan.hits:
            outcome.problems.append(
                f"forget run {run}: recorded, then {scan.texts_found} of their texts "
                "still in the files after the next write"
            )
    run_eva("forget", "--user", user, "--data", str(data))
    found = soundness(data)
    if end_state(data) != expected:
        found.append("the end state differs from the uninterrupted forget's")
    outcome.problems.extend(f"forget run {run}: {p}" for p in found)
    shutil.rmtree(data, ignore_errors=True)


def stdin_lines(count: int) -> list[tuple[str, str]]:
    """(channel, text) of the lines serve-local is fed, over two channels."""
    return [
        (("general", "games")[i % 3 == 0], f"line {i} of the crash suite, " + "word " * (i % 40))
        for i in range(count)
    ]


def suite_serve_local(world: World, runs: int, rng: random.Random) -> Outcome:
    """Kill serve-local fed from stdin; every acknowledged line must be stored, once."""
    outcome = Outcome()
    lines = stdin_lines(600)
    feed = "".join(f"#{channel} Ann: {text}\n" for channel, text in lines).encode()
    wanted = {ch: [t.strip() for c, t in lines if c == ch] for ch in ("general", "games")}
    reference = fresh(None, world.root / "serve-reference")
    args = ["serve-local", "--acks", "--quiet", "--settings", str(world.settings)]
    clean_s = timed(lambda: run_eva(*args, "--data", str(reference), stdin=feed))
    for run in range(runs):
        data = fresh(None, world.root / f"serve-{run}")
        # from its first acknowledgement on, while it stores the rest
        killed, out = killed_run(
            eva_argv(*args, "--data", str(data)), rng.uniform(0.0, clean_s / 2), stdin=feed,
            after_line=b"#",
        )
        outcome.runs += 1
        outcome.killed += killed
        outcome.finished_first += not killed
        acks = [line.split() for line in out.decode().splitlines() if line.startswith("#")]
        outcome.acknowledged += len(acks)
        found: list[str] = []
        if data.exists():
            run_eva(*args, "--data", str(data), stdin=b"")  # finishes the work left
            found = soundness(data)
            stored = channel_texts(data)
        else:
            stored = {}
        for name, index in acks:
            channel = name.lstrip("#")
            texts = stored.get(channel, [])
            if int(index) >= len(texts):
                found.append(f"acknowledged #{channel} {index} is not stored")
        for channel, texts in stored.items():
            if texts != wanted[channel][: len(texts)]:
                found.append(f"#{channel} holds other than the first {len(texts)} lines fed")
        outcome.problems.extend(f"serve-local run {run}: {p}" for p in found)
        shutil.rmtree(data, ignore_errors=True)
    return outcome


def channel_texts(data: Path) -> dict[str, list[str]]:
    with opened(data) as store:
        metas = store.streams()
    return {
        meta.channel_name: [
            text for text, _ in stored_texts(data, StreamId(meta.guild_id, meta.channel_id))
        ]
        for meta in metas
    }


def suite_bot(world: World, runs: int, rng: random.Random) -> Outcome:
    """Kill the bot while Discord delivers messages; after a restart every message posted
    is stored exactly once, in order (the restart reads back what it missed)."""
    outcome = Outcome()
    for run in range(runs):
        data = fresh(None, world.root / f"bot-{run}")
        posted, stream, problem = bot_run(data, run, rng)
        outcome.runs += 1
        outcome.killed += 1
        outcome.acknowledged += len(posted)
        found = [] if problem is None else [problem]
        if data.exists():
            found.extend(soundness(data))
            texts = [text for text, _ in stored_texts(data, stream)]
            if texts != posted:
                found.append(f"stored {len(texts)} messages, not the {len(posted)} posted")
        outcome.problems.extend(f"bot run {run}: {p}" for p in found)
        shutil.rmtree(data, ignore_errors=True)
    return outcome


def bot_run(data: Path, run: int, rng: random.Random) -> tuple[list[str], StreamId, str | None]:
    """One bot run: the texts posted, the channel, and what went wrong on the way."""
    from eva.testing.fake_discord import FakeDiscord

    fake = FakeDiscord()
    alice = fake.add_user("alice")
    guild = fake.add_guild("komodo")
    stream = StreamId(guild.id, guild.general.id)
    posted: list[str] = []
    with fake.serve():
        child = start_bot(fake, data, 0)
        try:
            kill_at = rng.randrange(5, 40)
            for i in range(40):
                if i == kill_at:
                    child.send_signal(signal.SIGKILL)
                    child.wait()
                text = f"message {i} of bot run {run}"
                fake.post_message(guild.id, guild.general.id, alice, text)
                posted.append(text)
                time.sleep(rng.uniform(0.0, 0.03))
        except RuntimeError as error:
            return posted, stream, str(error)
        finally:
            stop_bot(child)

        def stored_all() -> bool:
            return len(stored_texts(data, stream)) >= len(posted)

        return posted, stream, restart_until(fake, data, stored_all, "store every message")


def suite_delete(world: World, runs: int, rng: random.Random) -> Outcome:
    """Kill the bot while people delete messages, long before its purge is due; once it
    is started again, no file holds the words of a message the log says was deleted."""
    outcome = Outcome()
    for run in range(runs):
        data = fresh(None, world.root / f"delete-{run}")
        deleted, stream, problem = delete_run(data, run, rng)
        outcome.runs += 1
        outcome.killed += 1
        outcome.acknowledged += len(deleted)
        found = [] if problem is None else [problem]
        if data.exists():
            found.extend(soundness(data))
            # a deletion the kill came before never reached the log: its text stays
            kept = {text for text, erased in stored_texts(data, stream) if not erased}
            blob = b"".join(p.read_bytes() for p in data.rglob("*") if p.is_file())
            left = [text for text in deleted if text not in kept and text.encode() in blob]
            if left:
                found.append(f"{len(left)} deleted texts still in the files, e.g. {left[0]!r}")
        outcome.problems.extend(f"delete run {run}: {p}" for p in found)
        shutil.rmtree(data, ignore_errors=True)
    return outcome


def delete_run(
    data: Path, run: int, rng: random.Random
) -> tuple[list[str], StreamId, str | None]:
    """One run: messages posted and some deleted, the bot killed, started again and given
    time to purge; the texts deleted in Discord, the channel, and what went wrong."""
    from eva.testing.fake_discord import FakeDiscord

    fake = FakeDiscord()
    alice = fake.add_user("alice")
    guild = fake.add_guild("komodo")
    stream = StreamId(guild.id, guild.general.id)
    deleted: list[str] = []
    with fake.serve():
        child = start_bot(fake, data, 0)
        try:
            sent = []
            for i in range(20):
                text = f"secret {i} of delete run {run} zq{rng.randrange(10**9)}"
                sent.append((fake.post_message(guild.id, guild.general.id, alice, text), text))
            time.sleep(1.0)
            kill_at = rng.randrange(0, 10)
            for i, (message, text) in enumerate(sent[:10]):
                if i == kill_at:
                    break
                fake.delete_message(message)
                deleted.append(text)
                time.sleep(rng.uniform(0.0, 0.1))
            time.sleep(rng.uniform(0.0, 0.5))
            child.send_signal(signal.SIGKILL)
            child.wait()
        except RuntimeError as error:
            return deleted, stream, str(error)
        finally:
            stop_bot(child)

        def purged() -> bool:  # every deletion stored is purged
            with opened(data) as store:
                meta = store.meta(stream)
                return meta is None or meta.unpurged == 0

        return deleted, stream, restart_until(fake, data, purged, "purge")


def restart_until(fake: Any, data: Path, done: Callable[[], bool], what: str) -> str | None:
    """Start the killed bot again, give it 30 s until `done`, and stop it; what went
    wrong, or None."""
    try:
        child = start_bot(fake, data, fake.identifies())
    except RuntimeError as error:
        return str(error)
    try:
        deadline = time.monotonic() + 30
        while not done():
            if time.monotonic() > deadline:
                return f"the restarted bot did not {what} in 30 s"
            time.sleep(0.2)
        child.send_signal(signal.SIGTERM)
        child.wait(30)
    except subprocess.TimeoutExpired as error:
        return str(error)
    finally:
        stop_bot(child)
    return None


def stop_bot(child: subprocess.Popen[bytes]) -> None:
    """Kill the bot if it still runs."""
    if child.poll() is None:
        child.kill()
        child.wait()


def start_bot(fake: Any, data: Path, identified: int) -> subprocess.Popen[bytes]:
    """`eva run` against the fake Discord, once it identified on the gateway."""
    child = subprocess.Popen(
        eva_argv("run", "--data", str(data), "--rest-url", fake.rest_url),
        env=child_env(DISCORD_TOKEN=fake.token),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while fake.identifies() <= identified:
        if child.poll() is not None:
            raise RuntimeError(f"eva run exited {child.returncode} before connecting")
        if time.monotonic() > deadline:
            child.kill()
            raise RuntimeError("eva run did not connect in 30 s")
        time.sleep(0.05)
    time.sleep(0.5)  # the guild arrives before the messages
    return child


def stored_texts(data: Path, stream: StreamId) -> list[tuple[str, bool]]:
    """(text, erased) of every message stored in the channel, by index."""
    if not data.exists():
        return []
    with opened(data) as store:
        meta = store.meta(stream)
        if meta is None:
            return []
        return [(m.content, m.deleted) for _, m in store.messages(stream, 0, meta.messages)]


def damage_projections(data: Path) -> None:
    """Drop the lines and the recall index of every channel: what --repair writes again."""
    with opened(data) as store:
        def drop(tables: Any) -> None:
            for table in ("lines", "postings"):
                for key, _ in list(tables.scan(table, b"", b"\xff" * 40)):
                    tables.delete(table, key)

        store.backend.write(drop)


def run_suite(runs: int, seed: int, only: list[str], root: Path) -> dict[str, Outcome]:
    rng = random.Random(seed)
    world = make_world(root)
    shares = {name: SHARES[name] for name in only}
    total = sum(shares.values())
    counts = {name: max(1, round(runs * share / total)) for name, share in shares.items()}
    outcomes: dict[str, Outcome] = {}
    settings = str(world.settings)
    for name in only:
        started = time.perf_counter()
        count = counts[name]
        if name == "import":
            outcome = suite_rerun(
                world, name, None,
                lambda d: ["import", str(world.export), "--data", str(d), "--quiet"], count, rng,
            )
        elif name == "build":
            outcome = suite_rerun(
                world, name, world.imported,
                lambda d: ["build", "--data", str(d), "--settings", settings], count, rng,
            )
        elif name == "repair":
            outcome = suite_rerun(
                world, name, world.built,
                lambda d: ["replay", "--repair", "--quiet", "--data", str(d)], count, rng,
                prepare=damage_projections,
            )
        elif name == "forget":
            outcome = suite_forget(world, count, rng)
        elif name == "serve-local":
            outcome = suite_serve_local(world, count, rng)
        elif name == "delete":
            outcome = suite_delete(world, count, rng)
        else:
            outcome = suite_bot(world, count, rng)
        outcome.seconds = round(time.perf_counter() - started, 1)
        outcomes[name] = outcome
        print(
            f"{name}: {outcome.runs} runs, {outcome.killed} killed mid-way, "
            f"{outcome.finished_first} done first, {outcome.acknowledged} acknowledged, "
            f"{len(outcome.problems)} problems ({outcome.seconds} s)",
            file=sys.stderr, flush=True,
        )
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200, help="runs over all commands")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", default=",".join(SHARES), help="commands, comma separated")
    args = parser.parse_args(argv)
    only = [name for name in args.only.split(",") if name]
    unknown = [name for name in only if name not in SHARES]
    if unknown:
        parser.error(f"no such command in the suite: {', '.join(unknown)}")
    with tempfile.TemporaryDirectory(prefix="eva-crash-") as temp:
        outcomes = run_suite(args.runs, args.seed, only, Path(temp))
    problems = [p for o in outcomes.values() for p in o.problems]
    for problem in problems[:20]:
        print(problem, file=sys.stderr)
    print(json.dumps({
        "seed": args.seed,
        "commands": {name: msgspec.to_builtins(o) | {"problems": len(o.problems)}
                     for name, o in outcomes.items()},
        "runs": sum(o.runs for o in outcomes.values()),
        "problems": len(problems),
    }))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
