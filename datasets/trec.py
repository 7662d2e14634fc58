"""TREC qrels and run files in and out, as Polars frames with the schema's column names.

- qrels: `query_id iteration memory_id relevance` per line (`q1 0 m7 2`); read as
  `(query_id, memory_id, relevance)`, the iteration field ignored and written as 0.
- run: `query_id Q0 memory_id rank score tag` per line; read as
  `(query_id, memory_id, rank, score)`.

Fields are separated by any whitespace; blank lines are skipped. A line that does not
parse raises `IngestError` naming the file, the line and the field.

trec_eval ranks by score (ties broken by memory id), not by the rank field. msprlab's
order is the engine's, so `write_run` writes scores that are strictly decreasing with
rank within each query (EVALUATION.md). A query whose scores already are is written as
given; otherwise (a tie, an increase, a null or a NaN) its scores are replaced by the
surrogate `n - i`, where n is the query's number of rows and i the 0-based position by
rank: n, n-1, ..., 1. External tools then see exactly the written order.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import polars as pl

from .validate import IngestError, first_bad_row, show

__all__ = ["QRELS_FIELDS", "RUN_FIELDS", "read_qrels", "read_run", "write_qrels", "write_run"]

QRELS_FIELDS = ("query_id", "iteration", "memory_id", "relevance")
RUN_FIELDS = ("query_id", "Q0", "memory_id", "rank", "score", "tag")


def _read_fields(path: Path, names: Sequence[str]) -> pl.DataFrame:
    """Every non-blank line split into `names` (strings), with `_file` and `_row` (line)."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise IngestError(path.name, f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    frame = (pl.DataFrame({"line": pl.Series(lines, dtype=pl.String)})
             .with_columns(_file=pl.lit(path.name),
                           _row=pl.int_range(1, pl.len() + 1, dtype=pl.Int64))
             .filter(pl.col("line").str.strip_chars() != ""))
    pattern = r"^\s*" + r"\s+".join([r"(\S+)"] * len(names)) + r"\s*$"
    parts = frame["line"].str.extract_groups(pattern).struct.unnest()
    parts.columns = list(names)
    frame = pl.concat([frame, parts], how="horizontal")
    i = first_bad_row(frame, pl.col(names[0]).is_null())
    if i is not None:
        line = frame["line"][i]
        raise IngestError(f"{path.name} line {frame['_row'][i]}",
                          f"expected {len(names)} fields ({' '.join(names)}), got "
                          f"{len(line.split())}: {line!r}")
    return frame.drop("line")


def _numbers(frame: pl.DataFrame, path: Path, column: str,
             dtype: type[pl.Int64] | type[pl.Float64]) -> pl.DataFrame:
    cast = frame.with_columns(pl.col(column).cast(dtype, strict=False).alias("_cast"))
    i = first_bad_row(cast, pl.col("_cast").is_null())
    if i is not None:
        noun = "an integer" if dtype == pl.Int64 else "a number"
        raise IngestError(f"{path.name} line {frame['_row'][i]}",
                          f"expected {noun}, got {show(frame[column][i])}", field=column)
    return cast.with_columns(pl.col("_cast").alias(column)).drop("_cast")


def read_qrels(path: Path, *, provenance: bool = False) -> pl.DataFrame:
    """A TREC qrels file as `(query_id, memory_id, relevance)`; `_file`, `_row` if asked."""
    path = Path(path)
    frame = _numbers(_read_fields(path, QRELS_FIELDS), path, "relevance", pl.Int64)
    keep = ["query_id", "memory_id", "relevance"] + (["_file", "_row"] if provenance else [])
    return frame.select(keep)


def read_run(path: Path, *, provenance: bool = False) -> pl.DataFrame:
    """A TREC run file as `(query_id, memory_id, rank, score)`, in file order."""
    path = Path(path)
    frame = _read_fields(path, RUN_FIELDS)
    frame = _numbers(_numbers(frame, path, "rank", pl.Int64), path, "score", pl.Float64)
    keep = ["query_id", "memory_id", "rank", "score"] + (["_file", "_row"] if provenance else [])
    return frame.select(keep)


def _check_frame(frame: pl.DataFrame, what: str, columns: Sequence[str],
                 ids: Sequence[str]) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise ValueError(f"{what}: missing column(s) {missing} (found columns {frame.columns})")
    for column in columns:
        i = first_bad_row(frame, pl.col(column).is_null())
        if i is not None:
            raise ValueError(f"{what} row {i}: field {column!r}: required, got null")
    for column in ids:
        i = first_bad_row(frame, (pl.col(column).str.contains(r"\s"))
                          | (pl.col(column).str.len_bytes() == 0))
        if i is not None:
            raise ValueError(f"{what} row {i}: field {column!r}: a TREC id must be non-empty "
                             f"and free of whitespace, got {show(frame[column][i])}")


def _duplicates(frame: pl.DataFrame, what: str, key: Sequence[str]) -> None:
    i = first_bad_row(frame, ~pl.struct(key).is_first_distinct())
    if i is not None:
        shown = ", ".join(f"{c}={show(frame[c][i])}" for c in key)
        raise ValueError(f"{what} row {i}: duplicate {shown}")


@contextmanager
def _atomic_path(path: Path) -> Iterator[Path]:
    """A temp path beside `path` that replaces it only if the block succeeds."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _write_lines(frame: pl.DataFrame, path: Path) -> None:
    with _atomic_path(Path(path)) as tmp:
        frame.write_csv(tmp, separator=" ", include_header=False, quote_style="never")


def write_qrels(qrels: pl.DataFrame, path: Path) -> None:
    """Write `(query_id, memory_id, relevance)` as TREC qrels (`q1 0 m7 2`), in frame order."""
    _check_frame(qrels, "qrels", ("query_id", "memory_id", "relevance"),
                 ("query_id", "memory_id"))
    _duplicates(qrels, "qrels", ("query_id", "memory_id"))
    _write_lines(qrels.select("query_id", iteration=pl.lit(0), memory_id="memory_id",
                              relevance=pl.col("relevance").cast(pl.Int64)), path)


def write_run(run: pl.DataFrame, path: Path, *, tag: str = "msprlab") -> int:
    """Write `(query_id, memory_id, rank, score)` as a TREC run; return how many queries
    got surrogate scores.

    Rows are written by query_id, then rank. Scores of a query that are not strictly
    decreasing with rank (or hold a null or NaN) are replaced by `n - i` (module doc).
    """
    if not tag or any(ch.isspace() for ch in tag):
        raise ValueError(f"tag must be non-empty and free of whitespace, got {tag!r}")
    _check_frame(run, "run", ("query_id", "memory_id", "rank"), ("query_id", "memory_id"))
    if "score" not in run.columns:
        raise ValueError(f"run: missing column(s) ['score'] (found columns {run.columns})")
    _duplicates(run, "run", ("query_id", "memory_id"))
    _duplicates(run, "run", ("query_id", "rank"))
    score = pl.col("score").cast(pl.Float64)
    ordered = (run.select("query_id", "memory_id", pl.col("rank").cast(pl.Int64), score)
               .sort("query_id", "rank")
               .with_columns(
                   _ok=(score.is_not_null() & score.is_not_nan()
                        & ((score.diff() < 0) | (pl.int_range(pl.len()) == 0))
                        ).all().over("query_id"),
                   _surrogate=(pl.len() - pl.int_range(pl.len())).over("query_id")
                   .cast(pl.Float64)))
    rewritten = ordered.filter(~pl.col("_ok"))["query_id"].n_unique()
    lines = ordered.select(
        "query_id", Q0=pl.lit("Q0"), memory_id="memory_id", rank="rank",
        score=pl.when("_ok").then("score").otherwise("_surrogate"), tag=pl.lit(tag))
    _write_lines(lines, path)
    return rewritten
