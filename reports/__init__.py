"""Reports: render a results bundle as one self-contained HTML file and a markdown summary.

Renderers read the bundle's files only (`load_bundle`) and never run the engine; the same
bundle gives the same bytes.

>>> results = load_bundle("results/locomo-run-20260101-000000")        # doctest: +SKIP
>>> write_report(results, results.folder)                              # doctest: +SKIP
(PosixPath('.../report.html'), PosixPath('.../summary.md'))
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .explore_page import explore_page, write_chunks
from .html import render_html
from .load import BundleError, Results, load_bundle
from .markdown import render_markdown

__all__ = ["HTML_NAME", "MARKDOWN_NAME", "BundleError", "Results", "load_bundle", "render_html",
           "render_markdown", "write_report"]

HTML_NAME = "report.html"
MARKDOWN_NAME = "summary.md"


def _write_text_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report(results: Results, out: Path | str) -> tuple[Path, Path]:
    """Render both documents first, then write `report.html` and `summary.md` into `out`
    (created if needed), each atomically, and the per-query explorer's chunk files beside
    them (`explore_page.FOLDER`). Returns the two documents' paths."""
    out = Path(out)
    page = explore_page(results.explore)
    html, markdown = render_html(results, explore=page), render_markdown(results)
    out.mkdir(parents=True, exist_ok=True)
    write_chunks(page, out)
    paths = out / HTML_NAME, out / MARKDOWN_NAME
    for path, text in zip(paths, (html, markdown), strict=True):
        _write_text_atomic(path, text)
    return paths
