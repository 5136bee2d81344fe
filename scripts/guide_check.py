"""Follow docs/running.md from a fresh clone to Eva answering a mention, and time it.

Every step the guide gives a command for is run as written, in a temporary directory:
clone this repository, make a virtual environment and `pip install .`, `eva --version`,
`eva invite --application-id`, `eva settings > ~/.config/eva/eva.toml` (with
XDG_CONFIG_HOME pointing into the temporary directory), then `eva run --data DIR` with the
token and key in the environment. What a person does in Discord's developer portal and
client is played by the fake Discord: it issues the token and application id, and a person
posts a message that mentions Eva. The fake Messages API stands in for Claude. The only
options the guide does not give are the fakes' addresses (`--rest-url`, `--anthropic-url`).

    python scripts/guide_check.py [--keep]

Prints the seconds each step took and, last, one JSON object; exits 1 if a step failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from eva.testing.fake_anthropic import FakeMessagesAPI
from eva.testing.fake_discord import FakeDiscord

ROOT = Path(__file__).resolve().parents[1]
ANSWER = "We said Friday at seven, at the station."
STEP_TIMEOUT_S = 900


def step(name: str, timings: dict[str, float], argv: list[str], **kwargs: object) -> str:
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=STEP_TIMEOUT_S,
                          check=False, **kwargs)  # type: ignore[call-overload]
    timings[name] = round(time.perf_counter() - started, 1)
    print(f"{name}: {timings[name]} s", file=sys.stderr, flush=True)
    if done.returncode != 0:
        raise RuntimeError(f"{name} failed ({done.returncode}): {done.stderr[-800:]}")
    return str(done.stdout)


def follow(place: Path) -> dict[str, object]:
    timings: dict[str, float] = {}
    started = time.perf_counter()
    clone = place / "eva"
    step("clone", timings, ["git", "clone", "--quiet", str(ROOT), str(clone)])
    step("install", timings, [sys.executable, "-m", "venv", str(clone / ".venv")])
    pip = clone / ".venv" / "bin" / "pip"
    step("pip install .", timings, [str(pip), "install", "--quiet", "."], cwd=clone)
    eva = str(clone / ".venv" / "bin" / "eva")
    config = place / "config"
    env = {k: v for k, v in os.environ.items()
           if k not in ("EVA_SETTINGS", "PYTHONPATH", "ANTHROPIC_API_KEY", "DISCORD_TOKEN")}
    env["XDG_CONFIG_HOME"] = str(config)
    version = step("eva --version", timings, [eva, "--version"], env=env).strip()
    fake = FakeDiscord()
    person = fake.add_user("maya")
    guild = fake.add_guild("our server")
    invite = step("eva invite", timings,
                  [eva, "invite", "--application-id", str(fake.application_id)], env=env)
    if "scope=bot+applications.commands" not in invite:
        raise RuntimeError(f"the invite link lacks its scopes: {invite}")
    (config / "eva").mkdir(parents=True)
    settings = step("eva settings", timings, [eva, "settings"], env=env)
    (config / "eva" / "eva.toml").write_text(settings)
    model = FakeMessagesAPI(answer=lambda body: ANSWER)
    with fake.serve(), model.serve():
        env |= {"DISCORD_TOKEN": fake.token, "ANTHROPIC_API_KEY": model.key}
        data = place / "eva-data"
        run_started = time.perf_counter()
        bot = subprocess.Popen(
            [eva, "run", "--data", str(data), "--rest-url", fake.rest_url,
             "--anthropic-url", model.url],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        try:
            wait(lambda: fake.identifies() > 0 or bot.poll() is not None, 60)
            if bot.poll() is not None:
                raise RuntimeError(f"eva run exited: {bot.communicate()[1][-800:]}")
            time.sleep(1.0)  # her commands are registered once the guild is there
            timings["eva run connects"] = round(time.perf_counter() - run_started, 1)
            asked = time.perf_counter()
            fake.post_message(guild.id, guild.general.id, person,
                              f"<@{fake.bot_user.id}> what did we decide about Friday?",
                              mentions=[fake.bot_user])
            wait(lambda: fake.bot_messages(guild.general.id), 60)
            timings["mention answered"] = round(time.perf_counter() - asked, 1)
            reply = fake.bot_messages(guild.general.id)[0]["content"]
            commands = sorted(c["name"] for c in fake.commands(None))  # registered globally
        finally:
            bot.terminate()
            bot.communicate(timeout=60)
    return {
        "version": version,
        "seconds_from_clone_to_answer": round(time.perf_counter() - started, 1),
        "steps": timings,
        "reply": reply,
        "slash_commands": commands,
    }


def wait(condition: object, within: float) -> None:
    deadline = time.monotonic() + within
    while not condition():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise RuntimeError(f"not done within {within} s")
        time.sleep(0.1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()
    place = Path(tempfile.mkdtemp(prefix="eva-guide-"))
    try:
        result = follow(place)
    except (RuntimeError, subprocess.TimeoutExpired) as error:
        print(f"guide_check: {error}", file=sys.stderr)
        return 1
    finally:
        if not args.keep:
            subprocess.run(["rm", "-rf", str(place)], check=False)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
