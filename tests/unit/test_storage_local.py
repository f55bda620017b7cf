"""Content-addressed raw bodies in the local store."""

from __future__ import annotations

import hashlib

from udfs.config import load_config
from udfs.storage.bodies import LocalStore, object_key, open_store


def test_put_get_and_reuse(tmp_path):
    store = LocalStore(tmp_path)
    body = b"<html>same bytes</html>" * 100
    sha, key, new = store.put_body(body)
    assert sha == hashlib.sha256(body).hexdigest() and key == object_key(sha) and new
    assert store.get_body(key) == body
    assert store.put_body(body) == (sha, key, False)  # identical content: one object
    assert (tmp_path / key).stat().st_size < len(body)  # stored compressed
    assert [p.name for p in (tmp_path / "raw" / sha[:2]).iterdir()] == [f"{sha}.gz"]



def test_a_body_is_stored_again_after_its_folder_went_away(tmp_path):
    # The store makes a raw/ folder when a write finds it missing: one removed after
    # the store wrote there (an operator's clean-up) is made again, and no temporary
    # file is left behind.
    import shutil

    store = LocalStore(tmp_path)
    first, second = b"<p>one</p>" * 50, b"<p>two</p>" * 50
    sha, key, _ = store.put_body(first)
    shutil.rmtree(tmp_path / "raw")
    other = hashlib.sha256(second).hexdigest()
    (tmp_path / "raw").mkdir()
    again = store.put_body(first)
    assert again == (sha, key, True) and store.get_body(key) == first
    assert store.put_body(second)[2] and store.get_body(object_key(other)) == second
    assert not [p for p in (tmp_path / "raw").rglob(".tmp-*")]

def test_open_store_follows_configuration(tmp_path):
    cfg = load_config(env={}, overrides=[f"storage.local_dir={tmp_path}"])
    assert isinstance(open_store(cfg), LocalStore)


def test_plain_objects_put_get_list(tmp_path):
    store = LocalStore(tmp_path)
    store.put_object("audit/day=2026-12-01/t/b.jsonl.gz", b"two")
    store.put_object("audit/day=2026-12-01/t/a.jsonl.gz", b"one")
    store.put_object("audit/day=2026-12-02/t/c.jsonl.gz", b"three")
    store.put_object("audit/day=2026-12-01/t/a.jsonl.gz", b"one again")  # replaced whole
    assert store.get_object("audit/day=2026-12-01/t/a.jsonl.gz") == b"one again"
    assert list(store.list_objects("audit/day=2026-12-01/")) == [
        "audit/day=2026-12-01/t/a.jsonl.gz", "audit/day=2026-12-01/t/b.jsonl.gz"]
    assert len(list(store.list_objects("audit/"))) == 3
    assert list(store.list_objects("audit/day=2026-12")) == sorted(
        store.list_objects("audit/"))  # a prefix need not end at a folder
    assert list(store.list_objects("nothing/here/")) == []
    assert not list(tmp_path.rglob(".tmp-*"))  # no temporary file left behind
