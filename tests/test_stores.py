"""The change-logging dicts behind the positional search's index (engine/stores.py)."""

from __future__ import annotations

import copy
import json
import pickle

import pytest

from msprlab.engine import stores
from msprlab.engine.stores import ChangeLog, PayloadStore, StoredPayload


def test_every_way_of_changing_a_key_is_logged() -> None:
    log = ChangeLog({"a": 1})
    assert log.changes == ["a"]
    log["b"] = 2
    del log["a"]
    log.pop("b")
    log.pop("missing", None)  # nothing removed: nothing logged
    log.setdefault("c", 3)
    log.setdefault("c", 4)    # already there: unchanged, not logged
    log.update({"d": 4}, e=5)
    log |= {"f": 6}
    log.popitem()
    log.clear()
    assert log.changes == ["a", "b", "a", "b", "c", "d", "e", "f", "f", "c", "d", "e"]
    assert log == {}


def test_a_stored_payload_is_a_copy_whose_edits_are_logged_under_its_memory() -> None:
    given = {"data": "Alice likes window seats", "user_id": "alice"}
    store = PayloadStore()
    store["m1"] = given
    stored = store["m1"]
    assert type(stored) is StoredPayload and stored == given and stored is not given
    given["data"] = "changed"  # the caller's dict is not the store's
    assert stored["data"] == "Alice likes window seats"
    count = len(store.changes)
    stored["data"] = "Alice likes aisle seats"
    stored.update(user_id="bob")
    del stored["user_id"]
    stored.setdefault("run_id", "r1")
    stored.pop("run_id")
    stored |= {"x": 1}
    stored.popitem()
    stored.clear()
    assert store.changes[count:] == ["m1"] * 8


def test_copies_pickles_and_deep_copies_are_plain_dicts() -> None:
    store = PayloadStore(m1={"data": "text", "metadata": {"k": [1, 2]}})
    for value in (store, store["m1"]):
        for duplicate in (copy.copy(value), copy.deepcopy(value), value.copy(),
                          pickle.loads(pickle.dumps(value))):
            assert type(duplicate) is dict and duplicate == value
    deep = copy.deepcopy(store["m1"])
    deep["metadata"]["k"].append(3)
    assert store["m1"]["metadata"]["k"] == [1, 2]
    assert json.loads(json.dumps(store)) == {"m1": {"data": "text", "metadata": {"k": [1, 2]}}}


def test_a_long_log_starts_afresh_in_a_new_epoch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(stores, "_LOG_SIZE", 3)
    log = ChangeLog()
    for key in "abcd":
        log[key] = 0
    assert (log.epoch, log.changes) == (1, ["d"])
