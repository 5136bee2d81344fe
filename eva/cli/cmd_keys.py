# `eva keys`: where the key store is, which one a data directory is keyed with, and (asked
# for) the master key, to keep apart from the data or give as EVA_MASTER_KEY.
from __future__ import annotations

import argparse
import base64
import os
from pathlib import Path

from eva.cli.common import UserError, add_data_option, add_json_option, print_json
from eva.store.event_store import EventStore
from eva.store.key_binding import bound_id
from eva.store.key_store import KEYS_ENV, MASTER_ENV, KeyStoreError, default_path, open_key_store
from eva.store.lmdb_kv import open_backend, open_backend_to_read
from eva.store.person_keys import PEOPLE_DIR, PersonKeys


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "keys",
        help="where the key store is, and which one a data directory is keyed with",
        description=(
            "Say where the key store is (~/.config/eva/keys, or EVA_KEYS), its id, where "
            "its master key comes from (its master.key file, or EVA_MASTER_KEY), and which "
            "key store the data directory is keyed with, if it is. With --show-master, "
            "print the master key (base64) to keep apart from the data, or to give every "
            "process of a deployment as EVA_MASTER_KEY. Makes nothing."
        ),
    )
    parser.add_argument("--show-master", action="store_true",
                        help="print the master key itself (a secret: mind where it goes)")
    add_data_option(parser)
    add_json_option(parser)
    parser.set_defaults(run=run)


def _keyed_with(data: Path) -> str | None:
    """The key store a data directory is keyed with, read without needing it."""
    if not (data / "data.mdb").exists():
        return None
    try:
        backend = open_backend_to_read(data) or open_backend(
            data, readonly=not os.access(data, os.W_OK)
        )
    except OSError as error:
        raise UserError(f"cannot open the data directory {data}: {error}") from None
    return bound_id(EventStore(backend))


def run(args: argparse.Namespace) -> int:
    where = default_path()
    try:
        store = open_key_store(where)
    except KeyStoreError as error:
        raise UserError(str(error)) from None
    keyed = _keyed_with(args.data)
    source = "EVA_MASTER_KEY" if os.environ.get(MASTER_ENV, "").strip() else "master.key"
    if args.show_master:
        if store is None:
            raise UserError(f"there is no key store at {where} (set {KEYS_ENV} to where it is)")
        print(base64.b64encode(store.master).decode())
        return 0
    try:
        servers, held, destroyed = (
            (0, 0, 0) if store is None else PersonKeys(where, store.master).census()
        )
    except KeyStoreError as error:
        raise UserError(str(error)) from None
    if args.json:
        print_json({
            "key_store": str(where),
            "id": None if store is None else store.id,
            "master_from": None if store is None else source,
            "people_keys": held,
            "people_keys_destroyed": destroyed,
            "servers": servers,
            "data": str(args.data),
            "data_keyed_with": keyed,
        })
        return 0
    if store is None:
        print(f"no key store at {where}: the first command that writes makes one "
              f"({KEYS_ENV} names another place)")
    else:
        print(f"key store {store.id} at {where}, its master key from {source}")
        print(f"people's keys: {held:,} in {servers:,} server(s), {destroyed:,} destroyed by "
              f"forgets; in {where / PEOPLE_DIR}, to back up with the master key")
    if keyed is not None:
        same = store is not None and store.id == keyed
        print(f"{args.data} is keyed with key store {keyed}"
              + ("" if same else f": not this one; set {KEYS_ENV} to where {keyed} is"))
    elif (args.data / "data.mdb").exists():
        print(f"{args.data} is keyed with no key store yet (the next command that writes "
              "keys it with this one)")
    return 0
