# The key store: made outside the data directory on the first write, bound to it for good,
# and the secret that keeps a forget's record from telling who was forgotten.
from __future__ import annotations

import base64
import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from test_forget import PEOPLE, chat

from eva.cli.main import main
from eva.core.events import MessagePosted
from eva.core.forget import UNKEYED, Forgotten, PersonHashes, person_hash, person_messages
from eva.core.keys import StreamId
from eva.store import lmdb_kv
from eva.store.event_store import EventStore
from eva.store.key_binding import bind, bound_id
from eva.store.key_store import KeyStoreError, open_key_store
from eva.store.lmdb_kv import open_backend
from eva.store.private import PRIVATE_DIR, PRIVATE_FILE

STREAM = StreamId(9, 1)
BO = 202


@pytest.fixture
def keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    where = tmp_path / "config" / "keys"
    monkeypatch.setenv("EVA_KEYS", str(where))
    return where


def filled(data: Path) -> None:
    """A data directory written without a key store, as one written before there was one."""
    store = EventStore(open_backend(data))
    store.append(STREAM, chat(STREAM, 40))
    open_backend(data).close()


def run(*argv: str, data: Path) -> int:
    try:
        return main([*argv, "--data", str(data)])
    finally:
        lmdb_kv.open_backend(data).close()


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_the_first_write_makes_the_key_store_outside_the_data_and_says_so(
    keys: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    filled(data)
    assert run("status", data=data) == 0  # reading makes nothing
    assert not keys.exists()
    capsys.readouterr()
    assert run("forget", "--user", str(BO), data=data) == 0
    err = capsys.readouterr().err
    assert f"created the key store at {keys}" in err and "Back it up apart" in err
    assert mode(keys) == PRIVATE_DIR
    assert {p.name for p in keys.iterdir()} == {"master.key", "store.json", ".lock", "people"}
    assert all(mode(p) == PRIVATE_FILE for p in keys.iterdir() if p.is_file())
    people = list((keys / "people").iterdir())  # the data keys of the people in it
    assert mode(keys / "people") == PRIVATE_DIR and people
    assert all(mode(p) == PRIVATE_FILE for p in people)
    assert len(base64.b64decode((keys / "master.key").read_bytes().strip())) == 32
    assert not keys.is_relative_to(data)
    # bound: the next command names no new store
    assert run("forget", "--user", "101", data=data) == 0
    assert "created the key store" not in capsys.readouterr().err
    # a backup says what it does not hold
    assert main(["backup", str(tmp_path / "backup"), "--data", str(data)]) == 0
    made = open_key_store()
    assert made is not None
    assert f"keyed with key store {made.id} ({keys})" in capsys.readouterr().out


def test_who_was_forgotten_cannot_be_read_off_the_data_files_with_a_member_list(
    keys: Path, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    filled(data)
    assert run("forget", "--user", str(BO), data=data) == 0
    blob = b"".join(p.read_bytes() for p in data.iterdir() if p.is_file())
    # the unkeyed hash of every member is computable by anyone: none is in the files
    assert not any(person_hash(member).encode() in blob for member in PEOPLE)
    store = open_key_store()
    assert store is not None
    keyed = store.person_hashes().recorded(BO)
    assert keyed.encode() in blob  # the record is there, under a hash only the key store gives
    assert keyed != person_hash(BO)
    other = PersonHashes(os.urandom(32))  # another secret: another hash
    assert other.recorded(BO) != keyed
    # nor do their erased messages say whose they were
    store = EventStore(open_backend(data))
    authors = {e.author_id for _, e in store.events(STREAM) if isinstance(e, MessagePosted)}
    open_backend(data).close()
    assert BO not in authors and 0 in authors and 101 in authors


def test_a_bound_directory_is_opened_with_its_key_store_only(
    keys: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    filled(data)
    assert run("forget", "--user", str(BO), data=data) == 0
    made = open_key_store()
    assert made is not None
    # no key store where EVA_KEYS says: refused in one line, and none made in its place
    elsewhere = tmp_path / "elsewhere"
    monkeypatch.setenv("EVA_KEYS", str(elsewhere))
    capsys.readouterr()
    for argv in (("status",), ("forget", "--user", "101"), ("export", "--user", "101")):
        assert run(*argv, data=data) == 1
        err = capsys.readouterr().err
        assert f"keyed with key store {made.id}" in err and "EVA_KEYS" in err
        assert "Traceback" not in err
    assert not elsewhere.exists()
    # another key store: refused as well
    assert open_key_store(create=True) is not None
    assert run("status", data=data) == 1
    assert f"not with the one at {elsewhere}" in capsys.readouterr().err
    monkeypatch.setenv("EVA_KEYS", str(keys))
    # a wrong master key: nothing read with it
    monkeypatch.setenv("EVA_MASTER_KEY", base64.b64encode(b"x" * 32).decode())
    assert run("status", data=data) == 1
    assert "is not the one the key store" in capsys.readouterr().err
    monkeypatch.setenv("EVA_MASTER_KEY", "not base64 at all")
    assert run("status", data=data) == 1
    assert "EVA_MASTER_KEY must be 32 bytes in base64" in capsys.readouterr().err
    monkeypatch.delenv("EVA_MASTER_KEY")
    # the master key given apart from the files works, the file gone
    master = (keys / "master.key").read_bytes().strip().decode()
    (keys / "master.key").unlink()
    assert run("status", data=data) == 1
    assert "has no master key" in capsys.readouterr().err
    monkeypatch.setenv("EVA_MASTER_KEY", master)
    assert run("status", data=data) == 0


def test_a_key_store_that_cannot_be_made_keeps_a_command_from_writing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory")
    monkeypatch.setenv("EVA_KEYS", str(a_file / "keys"))  # no one may make a directory here
    data = tmp_path / "data"
    filled(data)
    before = (data / "data.mdb").read_bytes()
    capsys.readouterr()
    assert run("forget", "--user", str(BO), data=data) == 1
    err = capsys.readouterr().err
    assert "cannot be created" in err and "EVA_KEYS" in err and "Traceback" not in err
    assert (data / "data.mdb").read_bytes() == before


def test_records_made_before_the_key_store_still_match_their_person(tmp_path: Path) -> None:
    keyed = PersonHashes(b"s" * 32)
    assert keyed.all_of(BO) == (keyed.recorded(BO), person_hash(BO))
    assert UNKEYED.all_of(BO) == (person_hash(BO),)
    # a forget recorded unkeyed keeps the person out of an import after keying
    forgotten = Forgotten({person_hash(BO): 1_000}, keyed)
    assert forgotten(BO, 1_000) and not forgotten(BO, 1_001) and not forgotten(101, 10)
    # and a forget pending under the old hash still finds their messages
    data = tmp_path / "data"
    filled(data)
    store = EventStore(open_backend(data))
    bind(store, None, write=True)  # no key store: nothing bound, nothing changed
    assert bound_id(store) is None and store.hashes is UNKEYED
    with store.backend.reading() as tables:
        old = person_messages(tables, STREAM, person_hash(BO), keyed)
        new = person_messages(tables, STREAM, keyed.recorded(BO), keyed)
    assert old == new and len(old) == sum(1 for p in chat(STREAM, 40) if p.author_id == BO)


def test_no_key_store_is_made_over_one_that_is_there(keys: Path) -> None:
    made = open_key_store(create=True)
    again = open_key_store(create=True)
    assert made is not None and again is not None and made.id == again.id
    (keys / "store.json").write_text("{not json")
    with pytest.raises(KeyStoreError, match="damaged"):
        open_key_store(create=True)


def _made_id(where: str) -> str:
    made = open_key_store(Path(where), create=True)
    assert made is not None
    return made.id


def test_processes_starting_at_once_make_one_store_and_one_master_key_is_one_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import multiprocessing

    with multiprocessing.get_context("spawn").Pool(4) as pool:
        ids = pool.map(_made_id, [str(tmp_path / "shared")] * 8)
    assert len(set(ids)) == 1
    master = base64.b64encode(os.urandom(32)).decode()
    monkeypatch.setenv("EVA_MASTER_KEY", master)
    one, two = _made_id(str(tmp_path / "pod-0")), _made_id(str(tmp_path / "pod-1"))
    assert one == two != ids[0]
    assert not (tmp_path / "pod-0" / "master.key").exists()  # given, so never written


def test_eva_keys_says_where_the_store_is_and_gives_the_master_key_when_asked(
    keys: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "data"
    filled(data)
    capsys.readouterr()
    assert run("keys", data=data) == 0
    out = capsys.readouterr().out
    assert f"no key store at {keys}" in out and "keyed with no key store yet" in out
    assert not keys.exists()  # it makes nothing
    assert run("forget", "--user", str(BO), data=data) == 0
    made = open_key_store()
    assert made is not None
    capsys.readouterr()
    assert run("keys", data=data) == 0
    out = capsys.readouterr().out
    assert f"key store {made.id} at {keys}, its master key from master.key" in out
    assert "people's keys: " in out and "1 server(s), 1 destroyed by forgets" in out
    assert f"is keyed with key store {made.id}" in out and "not this one" not in out
    assert run("keys", "--show-master", data=data) == 0
    master = capsys.readouterr().out.strip()
    assert master == (keys / "master.key").read_text().strip()
    # the master key given instead, in another place: the same store, found by its id; but
    # people's keys are not made again from it: what they wrote is not read without them
    monkeypatch.setenv("EVA_KEYS", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("EVA_MASTER_KEY", master)
    capsys.readouterr()
    assert run("memory", "9/1", data=data) == 1
    made_there, refused = capsys.readouterr().err.strip().splitlines()
    assert "created the key store at" in made_there
    assert "restore the key store's people folder" in refused
    shutil.copytree(keys / "people", tmp_path / "elsewhere" / "people")
    assert run("memory", "9/1", data=data) == 0
    assert run("keys", "--json", data=data) == 0
    value = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert value["id"] == value["data_keyed_with"] == made.id
    assert value["people_keys"] > 0 and value["people_keys_destroyed"] == 1
    assert value["master_from"] == "EVA_MASTER_KEY"


def test_the_key_store_sits_beside_the_settings_where_eva_keys_names_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from eva.store.key_store import default_path

    monkeypatch.delenv("EVA_KEYS")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    assert default_path() == tmp_path / "config" / "eva" / "keys"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_path() == tmp_path / "home" / ".config" / "eva" / "keys"
    monkeypatch.setenv("EVA_KEYS", "~/elsewhere")
    assert default_path() == tmp_path / "home" / "elsewhere"

