"""The change-logging dicts behind the positional search's index (engine/stores.py)."""

from __future__ import annotations

import copy
import json
import pickle
import random

import pytest

from msprlab.engine import stores
from msprlab.engine.hits import HitTemplates, seed_payload
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


# ---- vector hits from templates (engine/hits.py) --------------------------------------


def _write(store: PayloadStore, rng: random.Random, memory_id: str) -> None:
    """One random write: a payload put, edited in place (a key set, popped, deleted),
    removed, or the log run past its size (a new epoch)."""
    kind = rng.randrange(7)
    stored = store.get(memory_id)
    if kind == 0 or stored is None:
        store[memory_id] = {"data": rng.choice(["a b", "c", ""]), "user_id": rng.choice(
            ["u1", "u2"]), "topic": rng.choice(["x", "y"]), "role": "analyst"}
    elif kind == 1:
        stored[rng.choice(["data", "topic", "user_id", "extra", "actor_id"])] = rng.random()
    elif kind == 2:
        stored.pop(rng.choice(["topic", "role", "data"]), None)
    elif kind == 3 and "topic" in stored:
        del stored["topic"]
    elif kind == 4:
        store.pop(memory_id, None)
    elif kind == 5:
        stored.update(more=rng.random())
    else:
        for _ in range(rng.randrange(3)):
            store.changed("elsewhere")


@pytest.mark.parametrize("seed", range(4))
def test_hits_from_templates_are_the_hits_built_afresh(seed: int,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Writes of every kind between searches: each hit (key order included) is the one
    `seed_payload` builds from the payload as it is now, and a fresh dict each time."""
    monkeypatch.setattr(stores, "_LOG_SIZE", 16)  # epochs turn over within the test
    rng = random.Random(seed)
    store = PayloadStore()
    templates = HitTemplates(store)
    ids = [f"m{i}" for i in range(5)]
    made = 0
    for step in range(300):
        if step % 3:
            _write(store, rng, rng.choice(ids))
            continue
        templates.follow()
        for memory_id in ids:
            stored = store.get(memory_id)
            if stored is None:
                continue
            score = rng.random()
            hit = templates.hit(memory_id, stored, score)
            want = seed_payload(memory_id, stored, score)
            assert list(hit.items()) == list(want.items())
            hit["score"] = -1.0  # the caller's to change: the next hit is unaffected
            if hit["metadata"] is not None:
                hit["metadata"]["topic"] = "changed"
            made += 1
    assert made > 200 and store.epoch > 0
