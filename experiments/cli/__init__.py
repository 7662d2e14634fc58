"""The command line, one module per command: `parser` (the parser and the dispatch, `main`),
`experiment` (run, ablate, tune), `ingest` and `ingest_sources` (with `ingest_run`, what
every ingest verb shares), `evaluate`, `replay`, `report`; `exits` defines the exit statuses
once. The stages these commands run live one level up."""

from .parser import main

__all__ = ["main"]
