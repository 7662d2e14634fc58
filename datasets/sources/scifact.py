"""SciFact (BEIR split) as a `Dataset`, and a plain BM25 to check the lexical side against it.

The files ship in `datasets/data/scifact/` with their card (`CARD.md`: Wadden et al.,
EMNLP 2020; claims CC BY 4.0, abstracts ODC-By 1.0 from S2ORC, attribution required).

- **Memories.** Each corpus abstract is one memory, `memory_id = doc_id`, all owned by the
  one user `"scifact"`. `text = title + " " + the abstract's sentences joined by spaces`;
  `metadata` holds `title` and `structured`. The corpus has no times: `created_at`,
  `updated_at` and `deleted_at` are null and there are no events.
- **Queries.** Split `"test"` is BEIR's test split: the 300 claims of
  `claims_validation.csv` (the original dev claims) with `qrels_test.tsv`; `"train"` is the
  809 claims of `claims_train.csv` with `qrels_train.tsv`. `claims_test.csv` (the original
  test claims) has no judgments and is not loaded. A claim file has one row per evidence
  document; a claim is taken once, at its first row. `question_type` is null.
- **Qrels.** One row per (claim, cited doc) of the qrels tsv, relevance = its score (1).

The digest is the sha256 of the corpus, claims and qrels bytes and the split name.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import math
import re
import tokenize
from pathlib import Path

import numpy as np
import polars as pl
import scipy.sparse as sp

from ..schema import MEMORIES, QRELS, QUERIES, Dataset
from ..validate import IngestError

__all__ = ["SCIFACT_DIR", "SPLITS", "bm25_ndcg10", "bm25_weights", "load_scifact"]

SCIFACT_DIR = Path(__file__).resolve().parents[1] / "data" / "scifact"
SOURCE = "scifact"
VERSION = "scifact BEIR split (allenai/scifact via sumithra-p-v/claimverifier@b42f1c34)"
OWNER = "scifact"
CORPUS = "corpus.csv"
SPLITS = {"test": ("claims_validation.csv", "qrels_test.tsv"),
          "train": ("claims_train.csv", "qrels_train.tsv")}
_LOADER_REVISION = 1

_TOKEN = re.compile(r"[a-z0-9]+")


def _sentences(cell: str, *, file: str, row: int) -> list[str]:
    """The sentences of an `abstract` cell.

    The cell is NumPy's repr of a string array: quoted literals separated by whitespace,
    without commas, so `ast.literal_eval` would glue them together. Each string token is
    read on its own instead.
    """
    try:
        return [_literal(tok.string)
                for tok in tokenize.generate_tokens(io.StringIO(cell).readline)
                if tok.type == tokenize.STRING]
    except (tokenize.TokenError, SyntaxError, ValueError) as e:
        raise IngestError(f"{file} row {row}", f"cannot read the sentence list "
                          f"{cell[:60]!r}... ({e})", field="abstract") from e


def _literal(token: str) -> str:
    # Most sentences have no escapes: strip the quotes instead of a full literal_eval.
    if ("\\" not in token and token[0] in "'\"" and token[0] == token[-1]
            and not token.startswith(token[0] * 3)):
        return token[1:-1]
    value = ast.literal_eval(token)
    if not isinstance(value, str):
        raise ValueError(f"expected a string literal, got {token!r}")
    return value


def _read_csv(path: Path, columns: tuple[str, ...], *, separator: str = ",") -> pl.DataFrame:
    """All columns as strings, with `_file` and `_row` ("row k", k from 1 after the header).

    A row, not a line: abstracts span several lines.
    """
    frame = pl.read_csv(path, separator=separator, infer_schema=False)
    if missing := [c for c in columns if c not in frame.columns]:
        raise IngestError(path.name, f"missing columns {missing} (found {frame.columns})")
    return frame.with_columns(_file=pl.lit(path.name),
                              _row=pl.format("row {}", pl.int_range(1, pl.len() + 1)))


def load_scifact(split: str = "test", *, directory: str | Path = SCIFACT_DIR) -> Dataset:
    """Corpus abstracts as memories, the split's claims as queries, its qrels as qrels.

    Parameters
    ----------
    split : "test" (300 claims, 339 qrels) or "train" (809 claims, 919 qrels).
    directory : the folder with the SciFact files; the shipped copy by default.
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {sorted(SPLITS)}, got {split!r}")
    directory = Path(directory)
    claims_file, qrels_file = SPLITS[split]
    paths = [directory / CORPUS, directory / claims_file, directory / qrels_file]
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.read_bytes())
    digest.update(json.dumps({"split": split, "loader_revision": _LOADER_REVISION}).encode())

    # Read all three before the slow abstract parsing, so a missing column fails fast.
    corpus = _read_csv(paths[0], ("doc_id", "title", "abstract", "structured"))
    claims = _read_csv(paths[1], ("id", "claim"))
    judged = _read_csv(paths[2], ("query-id", "corpus-id", "score"), separator="\t")

    texts, metadata = [], []
    for row, (title, abstract, structured) in enumerate(
            corpus.select("title", "abstract", "structured").iter_rows(), start=1):
        sentences = _sentences(abstract or "", file=CORPUS, row=row)
        texts.append(" ".join([title or "", *sentences]).strip())
        metadata.append(json.dumps({"title": title, "structured": structured == "True"},
                                   ensure_ascii=False))
    memories = pl.DataFrame({"memory_id": corpus["doc_id"], "text": texts, "user_id": OWNER,
                             "metadata": metadata}, schema_overrides=dict(MEMORIES))
    memories = memories.select(
        *(pl.col(c) if c in memories.columns else pl.lit(None, t).alias(c)
          for c, t in MEMORIES.items()),
        corpus["_file"], corpus["_row"])
    queries = (claims.unique("id", keep="first", maintain_order=True)
               .select(query_id="id", text="claim", user_id=pl.lit(OWNER),
                       agent_id=pl.lit(None), run_id=pl.lit(None), question_type=pl.lit(None),
                       _file="_file", _row="_row")
               .cast(dict(QUERIES)))
    relevance = judged["score"].cast(pl.Int64, strict=False)
    if (bad := (relevance.is_null() & judged["score"].is_not_null()).arg_true()).len():
        i = bad[0]
        raise IngestError(f"{qrels_file} {judged['_row'][i]}", f"expected an integer, got "
                          f"{judged['score'][i]!r}", field="score")
    qrels = (judged.select(query_id="query-id", memory_id="corpus-id", relevance=relevance,
                           _file="_file", _row="_row")
             .cast(dict(QRELS)))
    return Dataset(source=f"{SOURCE}/{split}", version=VERSION, digest=digest.hexdigest(),
                   memories=memories, queries=queries, qrels=qrels)


def _term_counts(texts: list[str], vocabulary: dict[str, int], *,
                 grow: bool) -> sp.csr_matrix:
    """Lower-cased `[a-z0-9]+` token counts, shape (n_texts, len(vocabulary)).

    With `grow` unseen tokens join the vocabulary; without it they are dropped (a query
    term no document has scores nothing).
    """
    indptr, indices = [0], []
    for text in texts:
        for token in _TOKEN.findall(text.lower()):
            column = vocabulary.get(token)
            if column is None:
                if not grow:
                    continue
                column = vocabulary[token] = len(vocabulary)
            indices.append(column)
        indptr.append(len(indices))
    data = np.ones(len(indices), dtype=np.float64)
    counts = sp.csr_matrix((data, indices, indptr), shape=(len(texts), len(vocabulary)))
    counts.sum_duplicates()
    return counts


def bm25_weights(texts: list[str], *, k1: float = 1.2,
                 b: float = 0.75) -> tuple[sp.csr_matrix, dict[str, int]]:
    """Document-term BM25 weights, shape (n_docs, n_terms), and the vocabulary.

    w(d, t) = idf(t) * tf (k1 + 1) / (tf + k1 (1 - b + b |d| / avgdl)), with Lucene's
    idf(t) = ln(1 + (N - df + 0.5) / (df + 0.5)). A query's scores are then one sparse
    product: scores = query term counts @ weights.T.
    """
    vocabulary: dict[str, int] = {}
    tf = _term_counts(texts, vocabulary, grow=True)
    n_docs = tf.shape[0]
    lengths = np.asarray(tf.sum(axis=1)).ravel()
    df = np.bincount(tf.indices, minlength=tf.shape[1])
    idf = np.log1p((n_docs - df + 0.5) / (df + 0.5))
    norm = k1 * (1.0 - b + b * lengths / lengths.mean())
    rows = np.repeat(np.arange(n_docs), np.diff(tf.indptr))
    weights = tf.copy()
    weights.data = idf[tf.indices] * tf.data * (k1 + 1.0) / (tf.data + norm[rows])
    return weights, vocabulary


def bm25_ndcg10(ds: Dataset, *, k1: float = 1.2, b: float = 0.75) -> float:
    """Mean nDCG@10 of plain BM25 over the queries of `ds` that have a relevant memory.

    Every memory is a candidate for every query (SciFact has one owner). Ranking is by
    score, ties in memory order. NDCG uses linear gain (gain = relevance) and the ideal
    DCG of all the query's judged-relevant memories (EVALUATION.md). Query terms count
    with their multiplicity. Published BEIR BM25 on SciFact is about 0.665.
    """
    weights, vocabulary = bm25_weights(ds.memories["text"].to_list(), k1=k1, b=b)
    relevant = ds.qrels.filter(pl.col("relevance") > 0)
    queries = ds.queries.filter(pl.col("query_id").is_in(relevant["query_id"].implode()))
    if queries.height == 0:
        raise ValueError(f"{ds.source}: no query has a relevant memory; nDCG is undefined")
    query_terms = _term_counts(queries["text"].to_list(), vocabulary, grow=False)
    scores = np.asarray((query_terms @ weights.T).todense())
    # Stable sort of negated scores: equal scores keep memory order.
    top = np.argsort(-scores, axis=1, kind="stable")[:, :10]

    memory_ids = ds.memories["memory_id"].to_list()
    grades: dict[str, dict[str, int]] = {}
    for query_id, memory_id, relevance in relevant.select(*QRELS.names()).iter_rows():
        grades.setdefault(query_id, {})[memory_id] = relevance
    discounts = 1.0 / np.log2(np.arange(2, 12))
    values = []
    for row, query_id in enumerate(queries["query_id"].to_list()):
        judged = grades[query_id]
        gains = np.array([judged.get(memory_ids[j], 0) for j in top[row]], dtype=np.float64)
        ideal = np.sort(np.fromiter(judged.values(), dtype=np.float64))[::-1][:10]
        values.append(float(gains @ discounts[:gains.size])
                      / float(ideal @ discounts[:ideal.size]))
    return math.fsum(values) / len(values)
