"""Reference rankers on the ladder's searches: BM25, dense-only and the pool in ideal
order; not tuned, not arms.

They answer "how good could a plain retriever be on these searches?", so a researcher sees
whether the candidate pool, rather than the rerank weights, caps the ladder. BM25 and dense
rank, per evaluated search, the memories the replay's dense seeds are drawn from at that
moment (`timeline.Timeline`: the query owner's memories, same user_id / agent_id / run_id,
that have been added with a vector and not deleted), and is scored through `metrics.evaluate`
against the table's qrels, with the same ideal DCG over every judged memory as the ladder.

- `bm25`: the `bm25s` package with its defaults (the Lucene variant, k1 1.5, b 0.75; its
  tokenizer: lower-cased `\\w\\w+` tokens, English stopwords removed, no stemming), indexed
  once per distinct visible set, so its statistics are those of the visible memories only.
  Only memories sharing a query token are returned (score > 0), ties in memory order.
- `dense`: the exact cosine of the replay's own query vector against the visible memories'
  stored embeddings, top `limit` (`timeline.SeedPlan`, the seeds' code with the search's
  limit as the count): no graph, no rerank.
- `pool-ideal`: the candidate pool of the table's own replay in ideal order (`funnel.
  ideal_rankings`), the ceiling of any rerank: an oracle, since it reads the qrels.

>>> runs = reference_runs(dataset, table)                             # doctest: +SKIP
>>> frames = {r.name: reference_frame(table, r, metrics) for r in runs}  # doctest: +SKIP
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import polars as pl

from msprlab.datasets.schema import Dataset
from msprlab.datasets.timeline import Corpus, SeedPlan, Timeline, _search_groups, corpus_of
from msprlab.engine import EngineConfig, new_state

from .measures.funnel import ideal_rankings
from .measures.metrics import Metric
from .measures.scoring import per_search_frame, ranking_values
from .replay import CandidateTable
from .variants.walk import query_vectors

__all__ = ["BM25_LABEL", "POOL_IDEAL_LABEL", "REFERENCE_RANKERS", "ReferenceRun",
           "bm25_rankings", "dense_label", "pool_ideal_run", "reference_frame",
           "reference_runs", "visible_sets"]

REFERENCE_RANKERS = ("bm25", "dense", "pool-ideal")
POOL_IDEAL_LABEL = ("the reference arm's own candidate pool (dense seeds + graph expansion) in "
                    "ideal order, judged grade descending: the funnel's ceiling, the best any "
                    "weights can do on that pool")
BM25_LABEL = ("BM25 (bm25s defaults: Lucene variant, k1 1.5, b 0.75; tokens: lower-cased "
              "\\w\\w+, English stopwords removed, no stemming), one index per visible set")

Rows = npt.NDArray[np.int64]


@dataclass(frozen=True)
class ReferenceRun:
    """One reference ranker's output on a table's searches.

    rankings : per search (table order), the returned memory ids, best first.
    seconds : wall time of the ranking, indexing included (tokenising the corpus, too).
    visible_sets : distinct visible sets the searches saw (BM25 builds one index each).
    """

    name: str
    label: str
    rankings: list[list[str]]
    seconds: float
    visible_sets: int


def _searches_of(corpus: Corpus, searches: pl.DataFrame) -> list[tuple[int, int]]:
    """(time in µs, corpus query row) per search, as `SeedPlan` takes them."""
    row_of = {q: i for i, q in enumerate(corpus.query_ids)}
    times = searches["ts"].cast(pl.Datetime("us")).cast(pl.Int64).to_list()
    return [(ts, row_of[q]) for ts, q in zip(times, searches["query_id"].to_list(),
                                             strict=True)]


def _fresh_timeline(ds: Dataset, corpus: Corpus) -> Timeline:
    """A timeline with nothing applied yet: `SeedPlan` and `_search_groups` follow its
    pending additions and deletions up to each search's time themselves."""
    return Timeline(ds, corpus, new_state(EngineConfig()))


def visible_sets(ds: Dataset, corpus: Corpus, searches: pl.DataFrame
                 ) -> list[tuple[Rows, list[int]]]:
    """The distinct visible sets of `searches` (in time order, as a replay's are): per set,
    the corpus rows visible (row order) and the positions of the searches that see them."""
    # The grouping the seed plan uses: the visibility is the seeds' own, by construction.
    groups = _search_groups(corpus, _fresh_timeline(ds, corpus), _searches_of(corpus, searches))
    return list(groups.values())


def bm25_rankings(texts: Sequence[str], queries: Sequence[str],
                  sets: Sequence[tuple[Rows, list[int]]], limits: Sequence[int]
                  ) -> list[tuple[list[int], list[float]]]:
    """Per search, the corpus rows BM25 returns (score > 0, best first, ties in row order,
    at most its limit) and their scores; `texts` per corpus row, `queries` and `limits`
    per search, `sets` as `visible_sets` gives them."""
    import bm25s  # imported here: it pulls numba modules in, and only this needs it

    tokens, vocab = bm25s.tokenize(list(texts), show_progress=False)
    words = bm25s.tokenize(list(queries), return_ids=False, show_progress=False)
    # "" (bm25s's token for a text with none) would match the empty memories: left out.
    query_ids = [np.array([vocab[w] for w in ws if w and w in vocab], dtype=np.int64)
                 for ws in words]
    out: list[tuple[list[int], list[float]]] = [([], []) for _ in queries]
    for rows, members in sets:
        if rows.size == 0:
            continue
        index = bm25s.BM25()
        # The whole corpus's vocabulary: query tokens map once; absent tokens score 0.
        # create_empty_token=False: bm25s would otherwise add "" to our `vocab` dict.
        index.index(([tokens[r] for r in rows.tolist()], vocab), create_empty_token=False,
                    show_progress=False)
        for k in members:
            scores = index.get_scores_from_ids(query_ids[k])
            order = np.argsort(-scores, kind="stable")[:limits[k]]
            order = order[scores[order] > 0]
            out[k] = rows[order].tolist(), scores[order].tolist()
    return out


def _bm25_run(ds: Dataset, corpus: Corpus, searches: pl.DataFrame) -> ReferenceRun:
    started = time.perf_counter()
    sets = visible_sets(ds, corpus, searches)
    text_of = dict(zip(ds.queries["query_id"].to_list(), ds.queries["text"].to_list(),
                       strict=True))
    rows = bm25_rankings(ds.memories["text"].to_list(),
                         [text_of[q] for q in searches["query_id"].to_list()], sets,
                         searches["limit"].to_list())
    ids = corpus.memory_ids
    return ReferenceRun("bm25", BM25_LABEL, [[ids[r] for r in found] for found, _ in rows],
                        time.perf_counter() - started, len(sets))


def dense_label(ds: Dataset, source: str) -> str:
    embedder = ds.embeddings["embedder"][0] if ds.embeddings.height else "none"
    return (f"exact cosine of the {source} against the visible memories' stored "
            f"embeddings ({embedder}), top limit; no graph, no rerank")


def _dense_run(ds: Dataset, corpus: Corpus, searches: pl.DataFrame) -> ReferenceRun:
    started = time.perf_counter()
    vectors, source = query_vectors(ds, corpus)  # the replay's own query vectors
    plan = SeedPlan(corpus, _fresh_timeline(ds, corpus), _searches_of(corpus, searches),
                    vectors, searches["limit"].to_list())
    rankings = [list(plan.top[k][0]) for k in range(searches.height)]  # (ids, scores)
    seconds = time.perf_counter() - started
    return ReferenceRun("dense", dense_label(ds, source), rankings, seconds,
                        len(visible_sets(ds, corpus, searches)))


def pool_ideal_run(table: CandidateTable) -> ReferenceRun:
    """The table's candidate pool in ideal order (an oracle: it reads the qrels)."""
    started = time.perf_counter()
    rankings = ideal_rankings(table)
    return ReferenceRun("pool-ideal", POOL_IDEAL_LABEL, rankings, time.perf_counter() - started,
                        0)


def reference_runs(ds: Dataset, table: CandidateTable) -> list[ReferenceRun]:
    """BM25, dense-only and the pool in ideal order on the table's searches
    (`REFERENCE_RANKERS` order)."""
    corpus = corpus_of(ds)
    if corpus.vectors is None:
        raise ValueError("references: the dataset has no memory embeddings, so neither the "
                         "visible sets nor the dense ranking exist; ingest it with an embedder")
    searches = table.searches
    return [_bm25_run(ds, corpus, searches), _dense_run(ds, corpus, searches),
            pool_ideal_run(table)]


def reference_frame(table: CandidateTable, run: ReferenceRun,
                    metrics: Sequence[Metric]) -> pl.DataFrame:
    """One row per search, as `Scorer.frame` gives an arm's: search, event_id, query_id,
    intent, question_type and one column per metric, from the run's rankings and the
    table's qrels (every judged memory of the query, returned or not)."""
    s = table.searches
    if len(run.rankings) != s.height:
        raise ValueError(f"reference {run.name!r}: {len(run.rankings)} rankings for "
                         f"{s.height} searches")
    return per_search_frame(s, ranking_values(table, run.rankings, metrics), metrics)
