# `eva invite`: the link that adds Eva to a server, with exactly the permissions she uses.
#
# Shell: pure arithmetic on hikari's permission flags, printed. It may not know
# the application id (the operator gives it) and asks Discord nothing.
# Invariant: the permissions are the ones the bot's code needs, each named with
# why; nothing more (no administrator, no managing messages, no @everyone).
from __future__ import annotations

import argparse
from urllib.parse import urlencode

import hikari

from eva.cli.common import UserError, add_json_option, print_json

AUTHORIZE_URL = "https://discord.com/oauth2/authorize"
SCOPES = ("bot", "applications.commands")
"""bot: Eva joins as a bot user; applications.commands: her slash commands (/forget-me ...)."""
PERMISSIONS: tuple[tuple[hikari.Permissions, str], ...] = (
    (hikari.Permissions.VIEW_CHANNEL, "see the channels and read their new messages"),
    (hikari.Permissions.SEND_MESSAGES, "answer, and show that she is typing"),
    (hikari.Permissions.SEND_MESSAGES_IN_THREADS, "answer in threads"),
    (hikari.Permissions.READ_MESSAGE_HISTORY,
     "read what was said while she was away, and reply to a message"),
)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "invite",
        help="print the link that adds Eva to a server, with the permissions she uses",
        description=(
            "Print the OAuth2 link that adds the bot to a server: scopes bot and "
            "applications.commands, and the permission integer of exactly the permissions "
            "Eva uses, each named. APPLICATION_ID is on the application's General "
            "Information page in the Discord developer portal."
        ),
    )
    parser.add_argument("--application-id", type=int, required=True, metavar="ID",
                        help="the application's id (its client id)")
    add_json_option(parser)
    parser.set_defaults(run=run)


def permissions_value() -> int:
    """The permission integer of every permission Eva uses."""
    value = hikari.Permissions.NONE
    for permission, _ in PERMISSIONS:
        value |= permission
    return int(value)


def invite_url(application_id: int) -> str:
    """The link that adds the bot to a server with those permissions."""
    query = urlencode({
        "client_id": application_id,
        "scope": " ".join(SCOPES),
        "permissions": permissions_value(),
    })
    return f"{AUTHORIZE_URL}?{query}"


def run(args: argparse.Namespace) -> int:
    if args.application_id <= 0:
        raise UserError("--application-id must be the application's id, a positive number")
    url = invite_url(args.application_id)
    named = [(permission.name or str(int(permission)), why) for permission, why in PERMISSIONS]
    if args.json:
        print_json({
            "url": url,
            "scopes": list(SCOPES),
            "permissions": permissions_value(),
            "permission_names": [name for name, _ in named],
        })
        return 0
    print(url)
    print(f"scopes: {', '.join(SCOPES)}; permissions {permissions_value()}:")
    for name, why in named:
        print(f"  {name}: {why}")
    return 0
