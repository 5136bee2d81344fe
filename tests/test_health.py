"""The health endpoint: readiness from the shards, the store and the stop; the bytes of its
answers; served on trio's sockets; and answered by the bot against the fake Discord."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from eva.cli.cmd_run import group_shards
from eva.cli.common import UserError
from eva.cli.main import build_parser, main
from eva.core.health import ALIVE, HEAD_LIMIT, Health, answer, readiness
from eva.discord import health as health_shell
from eva.discord.health import serve_health
from eva.testing.fake_discord import FakeDiscord
from tests.test_bot import eva_running


def ready_of(**changes: object) -> Health:
    values: dict[str, object] = {
        "expected": [0, 1], "connected": {0: True, 1: True}, "store_open": True,
        "stopping": False,
    }
    values.update(changes)
    return readiness(**values)  # type: ignore[arg-type]


def test_ready_only_when_every_shard_is_connected_the_store_open_and_no_stop() -> None:
    assert ready_of() == Health(True, ("shard 0: connected", "shard 1: connected", "store: open"))
    down = ready_of(connected={0: True, 1: False})
    assert not down.ok and "shard 1: not connected" in down.lines
    missing = ready_of(connected={0: True})
    assert not missing.ok and "shard 1: not started" in missing.lines
    assert not ready_of(store_open=False).ok
    stopping = ready_of(stopping=True)
    assert not stopping.ok and stopping.lines[-1] == "stopping"
    # Shards chosen by Discord's advice: those started, and none yet is not ready.
    assert ready_of(expected=None, connected={3: True}).lines[0] == "shard 3: connected"
    assert not ready_of(expected=None, connected={}).ok


def status_and_body(data: bytes) -> tuple[int, str]:
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), body.decode()


def test_the_answers_bytes_status_and_body() -> None:
    down = Health(False, ("shard 0: not connected", "store: open"))
    get = b"GET /readyz HTTP/1.1\r\nHost: 10.0.0.7:8080\r\nUser-Agent: kube-probe/1.34\r\n\r\n"
    assert status_and_body(answer(get, ALIVE, down)) == (
        503, "shard 0: not connected\nstore: open\n")
    live = answer(b"GET /livez?verbose HTTP/1.1\r\n\r\n", ALIVE, down)
    assert status_and_body(live)[0] == 200
    assert b"Connection: close\r\n" in live and b"Content-Length: 24\r\n" in live
    head = answer(b"HEAD /livez HTTP/1.1\r\n\r\n", ALIVE, down)
    assert head.endswith(b"\r\n\r\n") and b"Content-Length: 24" in head
    assert status_and_body(answer(b"POST /livez HTTP/1.1\r\n\r\n", ALIVE, down))[0] == 405
    assert status_and_body(answer(b"GET /metrics HTTP/1.1\r\n\r\n", ALIVE, down))[0] == 404
    assert status_and_body(answer(b"hello\r\n\r\n", ALIVE, down))[0] == 400
    huge = b"GET /livez HTTP/1.1\r\nX: " + b"a" * HEAD_LIMIT
    assert status_and_body(answer(huge, ALIVE, down))[0] == 431


async def fetch(port: int, request: bytes) -> bytes:
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        received = b""
        while data := await stream.receive_some(4096):
            received += data
    return received


async def test_served_on_trio_sockets_one_answer_a_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = {"ok": True}

    def ready() -> Health:
        if state.get("broken"):
            raise RuntimeError("shards unreadable")
        return Health(state["ok"], ("checked",))

    monkeypatch.setattr(health_shell, "READ_TIMEOUT_S", 0.2)
    async with trio.open_nursery() as nursery:
        port = await nursery.start(serve_health, ready, 0, "127.0.0.1")
        request = b"GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n"
        assert status_and_body(await fetch(port, request)) == (200, "checked\n")
        state["ok"] = False
        assert status_and_body(await fetch(port, request))[0] == 503
        state["broken"] = True  # a fault in the check answers "not ready", the server goes on
        code, body = status_and_body(await fetch(port, request))
        assert code == 503 and "shards unreadable" in body
        # A client that sends half a head and waits is answered from what came, then closed;
        # one that sends nothing is closed unanswered.
        assert status_and_body(await fetch(port, b"GET /livez HTTP/1.1\r\n"))[0] == 200
        assert await fetch(port, b"") == b""
        nursery.cancel_scope.cancel()


async def test_the_bot_answers_live_and_ready_against_the_fake_discord(tmp_path: Path) -> None:
    fake = FakeDiscord(shard_count=2)
    fake.add_guild("one", shard=1)
    with fake.serve():
        async with eva_running(fake, tmp_path / "data", shard_ids=[1], shard_count=2,
                               health_port=0, health_host="127.0.0.1") as eva:
            assert eva.health_port
            ready = await fetch(eva.health_port, b"GET /readyz HTTP/1.1\r\n\r\n")
            assert status_and_body(ready) == (200, "shard 1: connected\nstore: open\n")
            live = await fetch(eva.health_port, b"GET /livez HTTP/1.1\r\n\r\n")
            assert status_and_body(live)[0] == 200
            eva.stop()  # asked to stop: not ready while it closes
            stopping = health_shell.bot_readiness(eva)
            assert not stopping.ok and stopping.lines[-1] == "stopping"
    assert fake.errors == []


def run_args(*argv: str) -> object:
    return build_parser("run").parse_args(["run", *argv])


def test_a_fleets_process_runs_the_shards_of_its_ordinal() -> None:
    args = run_args("--shard-group", "1", "--shards-per-group", "2", "--shard-count", "5")
    assert group_shards(args, "ignored") == [2, 3]  # type: ignore[arg-type]
    pod = run_args("--shard-group-from-hostname", "--shards-per-group", "2", "--shard-count", "5")
    assert group_shards(pod, "eva-2") == [4]  # type: ignore[arg-type]
    plain = run_args("--shard-ids", "0,3", "--shard-count", "4")
    assert group_shards(plain, "eva-9") == [0, 3]  # type: ignore[arg-type]
    for argv, words in (
        (("--shard-group-from-hostname", "--shard-count", "2"), "does not end in -<ordinal>"),
        (("--shard-group", "1"), "needs --shard-count"),
        (("--shards-per-group", "2", "--shard-count", "4"), "goes with --shard-group"),
    ):
        with pytest.raises(UserError, match=words):
            group_shards(run_args(*argv), "eva")  # type: ignore[arg-type]


def test_eva_run_refuses_an_ordinal_past_the_shard_count_before_opening_anything(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("DISCORD_TOKEN", "MTIz.abc.def")
    data = tmp_path / "data"
    status = main(["run", "--data", str(data), "--shard-group", "2", "--shards-per-group", "2",
                   "--shard-count", "4"])
    err = capsys.readouterr().err
    assert status == 1
    assert "process 2 would run shards 4..5, but there are only 4 shard(s)" in err
    assert "need 2 process(es)" in err and "Traceback" not in err
    assert not data.exists()
    with pytest.raises(SystemExit):  # one way of choosing the shards at a time
        build_parser("run").parse_args(["run", "--shard-ids", "0", "--shard-group", "0"])


async def test_a_health_port_already_taken_fails_the_start_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from eva.discord.process import EXIT_FAILED, run_bot

    fake = FakeDiscord()
    with fake.serve(), trio.socket.socket() as taken:
        await taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with trio.fail_after(15):
            status = await run_bot(fake.token, tmp_path / "data", rest_url=fake.rest_url,
                                   handle_signals=False, health_port=port,
                                   health_host="127.0.0.1")
    assert status == EXIT_FAILED
    assert f"could not answer health checks on port {port}" in caplog.text
    assert not fake.connected_shards()  # refused before the gateway was asked
