"""Time-ordered splits: test after train, a gap in between, per-user boundaries."""

from __future__ import annotations

from datetime import datetime, timedelta

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from msprlab.experiments.measures.splits import SplitSpec, split_searches, time_split, window_split

T0 = datetime(2026, 1, 1)


def searches(hours: list[int], users: list[str]) -> pl.DataFrame:
    return pl.DataFrame({"ts": [T0 + timedelta(hours=h) for h in hours], "user_id": users,
                         "agent_id": [None] * len(users), "run_id": [None] * len(users)},
                        schema_overrides={"agent_id": pl.String, "run_id": pl.String})


def test_global_split_gap_and_windows() -> None:
    frame = searches(list(range(10)), ["a", "b"] * 5)
    assert time_split(frame, test_fraction=0.3).to_list() == ["train"] * 7 + ["test"] * 3
    assert time_split(frame, test_fraction=0.3, gap=timedelta(hours=2)).to_list() == (
        ["train"] * 5 + ["gap"] * 2 + ["test"] * 3)
    assert window_split(frame, train_end=T0 + timedelta(hours=4),
                        test_start=T0 + timedelta(hours=6)).to_list() == (
        ["train"] * 4 + ["gap"] * 2 + ["test"] * 4)


def test_per_user_split_puts_every_user_in_both_windows() -> None:
    # user a searches early, user b late: a global split would leave a out of test.
    frame = searches([0, 1, 2, 3, 10, 11, 12, 13], ["a"] * 4 + ["b"] * 4)
    labels = time_split(frame, test_fraction=0.5, per_user=True).to_list()
    assert labels == ["train", "train", "test", "test"] * 2
    assert time_split(frame, test_fraction=0.5).to_list() == ["train"] * 4 + ["test"] * 4


def test_ties_at_the_boundary_all_go_to_test() -> None:
    frame = searches([0, 1, 1, 1, 2], ["a"] * 5)
    assert time_split(frame, test_fraction=0.5).to_list() == ["train"] + ["test"] * 4


@settings(max_examples=50, deadline=None)
@given(hours=st.lists(st.integers(0, 200), min_size=1, max_size=60),
       fraction=st.floats(0.05, 0.95), gap=st.integers(0, 30), per_user=st.booleans())
def test_no_train_search_is_at_or_after_a_test_search(hours, fraction, gap, per_user) -> None:
    users = [f"u{h % 3}" for h in hours]
    frame = searches(hours, users).with_columns(
        split=time_split(searches(hours, users), test_fraction=fraction,
                         gap=timedelta(hours=gap), per_user=per_user))
    for _, group in frame.group_by("user_id" if per_user else pl.lit(1)):
        train = group.filter(pl.col("split") == "train")["ts"]
        test = group.filter(pl.col("split") == "test")["ts"]
        assert test.len() >= 1
        if train.len():
            assert train.max() < test.min() - timedelta(hours=gap)


def test_bad_specs_are_rejected() -> None:
    for bad in ({"test_fraction": 0.0}, {"test_fraction": 1.0}, {"gap": timedelta(-1)},
                {"train_end": T0}, {"train_end": T0, "test_start": T0 - timedelta(1)}):
        with pytest.raises(ValueError, match="split"):
            SplitSpec(**bad)
    frame = searches([0, 1], ["a", "a"])
    assert split_searches(frame, SplitSpec(train_end=T0 + timedelta(hours=1),
                                           test_start=T0 + timedelta(hours=1))).to_list() == [
        "train", "test"]
