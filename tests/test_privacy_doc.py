# docs/privacy.md and /privacy say what the code does: the figures and commands they name.
from __future__ import annotations

import re
from pathlib import Path

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from eva.cli.main import COMMANDS
from eva.core.settings import LiveSettings
from eva.discord import command_texts as texts
from eva.discord.commands import command_definitions
from eva.store import key_ring as ring_module

POLICY = (Path(__file__).resolve().parents[1] / "docs" / "privacy.md").read_text()


def test_every_slash_command_the_policy_names_is_one_of_evas() -> None:
    ours = {builder.name for builder in command_definitions()}
    for text in (POLICY, texts.PRIVACY):
        named = set(re.findall(r"`/([a-z-]+)", text))
        assert named and named <= ours, named - ours
    # and every command a person or a moderator uses about their data is in the policy
    for name in ("my-data", "forget-me", "dont-remember-me", "remember-me", "forget-member",
                 "memory-here", "privacy"):
        assert f"`/{name}" in POLICY, name


def test_the_delays_it_names_are_the_defaults() -> None:
    live = LiveSettings()
    assert live.purge_delay_seconds == 600
    assert live.left_server_grace_days == 30
    for text in (POLICY, texts.PRIVACY):
        assert "ten minutes" in text and "30 days" in text


def test_the_command_line_it_names_exists_and_it_says_what_is_encrypted_and_what_not() -> None:
    for name in re.findall(r"`eva ([a-z-]+)", POLICY):
        assert name in COMMANDS, name
    assert "AES-256-GCM" in POLICY and ring_module.AESGCM is AESGCM  # the cipher the ring uses
    # the search index is not sealed yet: the policy must say so while it is not
    assert "search index" in POLICY and "Not encrypted" in POLICY
    assert "Anthropic" in POLICY and "Anthropic" in texts.PRIVACY
