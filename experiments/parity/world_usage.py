"""A world's usage period: searches through the library's `Memory.search`, the simulated
users' clicks and verdicts through `Memory.record_feedback`, and what the truth keeps.

From a day after the last turn: N searches of Zipf-popular questions
(`simulate.draw_stream`: popularity rank^-s, a search per hour on average), each
`Memory.search(question, user_id=<its conversation>, limit)` by the question's own user
(the library counts an access for each result it returns). The shown ranking meets the
simulated user (`simulate.SimulatedUsers`): the position-based click model reads the grades
of the shown memories, the verdict model judges each click, recorded with
`Memory.record_feedback(memory_id, helpful=..., query=question, user_id=...,
metadata={"rank": R} for `rank_share` of them)` 20 s x (i + 1) + 5 s after the search, as
`simulate_log` times them. A share of the verdicts (`no_query_share`) is recorded without
`query=`, as production has them; those give no success row.

A memory's grade at a search is 1 when it is evidence of the question (LoCoMo), or, on a
question whose truth follows the user's past verdicts (`preference_share` of them), when
that user judged it helpful for the question before: the truth changes as the user does.
Each search keeps the memories relevant to it then (`relevant`), the ranks clicked and the
ranks and verdicts judged (1-based).

The random streams are children of the seed (`SeedSequence(seed).spawn`): the question
stream, the users, the verdicts without a query, the preference questions, the ranks
recorded; the first three are those of worlds made before the last two existed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import numpy as np

from msprlab.datasets.simulate import (
    CLICK_STEP_US,
    SESSION_GAP_US,
    VERDICT_DELAY_US,
    SimulatedUsers,
    draw_stream,
)
from msprlab.datasets.timeline import to_datetime, to_us
from msprlab.engine.success import hash_query

from .standins import Clock, frozen_datetime_module
from .world_settings import WorldSettings

__all__ = ["USAGE_DELAY", "Search", "Tally", "use"]

USAGE_DELAY = timedelta(days=1)  # the usage period starts a day after the last turn
Progress = Callable[[str, int, int], None]


@dataclass
class Search:
    """One search as the truth keeps it (`truth/searches.parquet`)."""

    search: int
    ts: datetime
    user_id: str
    query_hash: str
    question_id: str
    question_type: str | None
    query: str
    preference: bool            # does this question's truth follow the user's verdicts
    shown: list[str]
    scores: list[float]
    relevant: list[str]         # the memories relevant to it then (artifact ids, sorted)
    clicked_ranks: list[int] = field(default_factory=list)   # 1-based
    verdict_ranks: list[int] = field(default_factory=list)   # 1-based
    verdict_helpful: list[bool] = field(default_factory=list)
    clicks: int = 0
    verdicts: int = 0


@dataclass
class Tally:
    clicks: int = 0
    verdicts: int = 0
    helpful: int = 0
    without_query: int = 0
    ranked: int = 0
    judged_hashes: set[str] = field(default_factory=set)
    # per question hash: the memories its user judged helpful, on preference questions
    liked: dict[str, set[str]] = field(default_factory=dict)


def use(memory: Any, clock: Clock, world: Any, ids: dict[str, str], settings: WorldSettings,
        report: Progress) -> tuple[list[Search], Tally]:
    """The usage period (module docstring), in time order; `world` is the LoCoMo part
    (`world._Locomo`), `ids` artifact memory id -> LoCoMo memory id."""
    stream_seed, users_seed, query_seed, preference_seed, rank_seed = np.random.SeedSequence(
        settings.seed).spawn(5)
    start_us = to_us(world.last + USAGE_DELAY)
    questions = world.questions
    answerable = np.full(questions.height, float(start_us))
    picks, times = draw_stream(np.random.default_rng(stream_seed), answerable,
                               settings.searches, float(settings.zipf_s), start_us,
                               float(settings.mean_gap_seconds))
    users = SimulatedUsers(settings.click_model, settings.verdict_model,
                           np.random.default_rng(users_seed))
    drop_query = np.random.default_rng(query_seed)
    records_rank = np.random.default_rng(rank_seed)
    texts, owners = questions["text"].to_list(), questions["user_id"].to_list()
    qids, kinds = questions["query_id"].to_list(), questions["question_type"].to_list()
    preferred = set() if settings.preference_share <= 0 else {
        str(hash_query(text)) for text, draw in zip(
            texts, np.random.default_rng(preference_seed).random(len(texts)), strict=True)
        if draw < settings.preference_share}
    artifact = {locomo: mid for mid, locomo in ids.items()}
    log: list[Search] = []
    tally = Tally()
    previous_end = -(1 << 62)
    for k, (q, earliest) in enumerate(zip(picks.tolist(), times.tolist(), strict=True)):
        at = max(earliest, previous_end + SESSION_GAP_US)
        clock.now = to_datetime(at)
        text, user = texts[q], owners[q]
        question = str(hash_query(text))
        found = memory.search(text, user_id=user, limit=settings.limit)["results"]
        shown = [str(r["id"]) for r in found[:settings.limit]]
        relevant = set(world.evidence[question])
        if question in preferred:
            relevant |= {ids[m] for m in tally.liked.get(question, ())}
        entry = Search(k, clock.now, user, question, qids[q], kinds[q], text,
                       question in preferred, shown,
                       [float(r.get("score") or 0.0) for r in found[:settings.limit]],
                       sorted(artifact[m] for m in relevant if m in artifact))
        log.append(entry)
        previous_end = at
        report("usage period", k + 1, settings.searches)
        if not shown:
            continue
        grades = np.array([int(ids.get(m) in relevant) for m in shown], dtype=np.int64)
        clicked, verdicts = users.react(grades)
        for i, (rank, helpful) in enumerate(zip(clicked, verdicts, strict=True)):
            previous_end = click_at = at + CLICK_STEP_US * (i + 1)
            entry.clicks += 1
            entry.clicked_ranks.append(rank + 1)
            tally.clicks += 1
            if helpful is None:
                continue
            previous_end = verdict_at = click_at + VERDICT_DELAY_US
            clock.now = to_datetime(verdict_at)
            asked = None if drop_query.random() < settings.no_query_share else text
            metadata = None
            if settings.rank_share > 0 and records_rank.random() < settings.rank_share:
                metadata = {"rank": rank + 1}
                tally.ranked += 1
            with frozen_datetime_module(clock):
                recorded = memory.record_feedback(shown[rank], helpful=helpful, query=asked,
                                                  user_id=user, metadata=metadata)
            if recorded is None:
                raise RuntimeError(f"record_feedback({shown[rank]!r}) returned None: MSPR "
                                   "feedback is off or the memory has no graph node")
            entry.verdicts += 1
            entry.verdict_ranks.append(rank + 1)
            entry.verdict_helpful.append(bool(helpful))
            tally.verdicts += 1
            tally.helpful += bool(helpful)
            if helpful and question in preferred:
                tally.liked.setdefault(question, set()).add(shown[rank])
            if asked is None:
                tally.without_query += 1
            else:
                tally.judged_hashes.add(entry.query_hash)
    return log, tally
