"""A verdict-labelled table's searches as impressions (experiments/counterfactual/logged.py)."""

from __future__ import annotations

import polars as pl
import pytest

from msprlab.experiments.counterfactual.click_model import IMPRESSIONS
from msprlab.experiments.counterfactual.logged import logged_searches

SEARCHES = pl.DataFrame({"search": [0, 1, 2], "query_id": ["h#0", "h#1", "g#0"],
                         "question": ["h", "h", "g"]})
VERDICTS = pl.DataFrame({"query_id": ["h#0", "h#0", "h#1", "g#0", "x#0"],
                         "memory_id": ["a", "z", "b", "c", "a"],
                         "relevance": [1, 0, 1, 1, 1]})


def test_each_shown_memory_is_an_impression_and_a_verdict_its_click() -> None:
    logged = logged_searches(SEARCHES, VERDICTS, [["a", "b", "c"], ["b", "a"], []], k=2,
                             source="test lists")
    frame = logged.impressions
    assert frame.schema == IMPRESSIONS
    assert frame.rows() == [(0, "h", "a", 1, True, True), (0, "h", "b", 2, False, False),
                            (1, "h", "b", 1, True, True), (1, "h", "a", 2, False, False)]
    # x#0 is no search of the table; z is judged but not in the top 2 shown, c's list is empty
    assert (logged.verdicts, logged.helpful, logged.outside, logged.helpful_outside,
            logged.empty, logged.searches) == (4, 3, 2, 1, 1, 3)
    assert "2 of 4 verdicts (50.0%; 66.7% of the helpful ones)" in logged.note()


def test_the_lists_must_match_the_searches() -> None:
    with pytest.raises(ValueError, match="2 lists for 3 searches"):
        logged_searches(SEARCHES, VERDICTS, [["a"], ["b"]], k=10, source="x")
    with pytest.raises(ValueError, match="k >= 1"):
        logged_searches(SEARCHES, VERDICTS, [[], [], []], k=0, source="x")
