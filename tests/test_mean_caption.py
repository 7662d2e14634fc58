"""The caption of the means' bootstrap CIs names the Monte Carlo error of each mean whose
bounds' error exceeds 0.0005, and says when none does."""

from __future__ import annotations

import math

import polars as pl

from msprlab.experiments.console_tables import MC_ERROR_SHOWN, mean_caption

METHOD = "percentile bootstrap over queries, 10,000 resamples, 95%"


def rows(errors: dict[str, float], unit: str = "query") -> pl.DataFrame:
    return pl.DataFrame({"arm": list(errors), "unit": [unit] * len(errors),
                         "ci_method": [METHOD] * len(errors), "ci_mc_error": list(errors.values())})


def test_only_the_errors_above_the_threshold_are_named() -> None:
    text = mean_caption(rows({"off": 0.0006, "tuned": 0.0004, "all": 0.00071,
                              "one": math.nan}))
    assert text.startswith(f"mean [95% CI]: {METHOD}, each arm its own resample stream")
    assert f"where above {MC_ERROR_SHOWN:g}: off 0.0006, all 0.0007 (the other 1 at most" in text
    assert "tuned" not in text


def test_none_above_the_threshold_is_said() -> None:
    assert mean_caption(rows({"off": 0.0002, "tuned": 0.0005})).endswith(
        f"the bounds' Monte Carlo error is at most {MC_ERROR_SHOWN:g}")


def test_units_are_named_where_the_rows_have_both() -> None:
    frame = pl.concat([rows({"off": 0.0006}), rows({"off": 0.002}, unit="search")])
    assert "off per query 0.0006, off per search 0.0020" in mean_caption(frame)
