"""Query intent: classification and the per-intent weight override (MSPR.md section 11).

A query is labelled by four regex rules, then, when none fires and the strategy allows it,
by a pluggable classifier standing in for the library's LLM call. The label moves α, β, γ
(and could move δ) by fixed deltas; ε and ζ are never touched. The declared edge-type priors
are kept as data only: the library never reads them (quirk 9).

>>> router = IntentRouter(IntentConfig())
>>> router.classify("What is Alice's seat preference?")
IntentResult(label=<Intent.FACTUAL: 'FACTUAL'>, confidence=1.0, source='regex')
>>> apply_weight_override(RetrievalConfig(), Intent.FACTUAL).gamma_graph
0.19999999999999998
"""

from __future__ import annotations

import dataclasses
import enum
import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from .config import IntentConfig, RetrievalConfig
from .graph import EdgeType

__all__ = [
    "EDGE_TYPE_PRIORS",
    "INTENT_DELTAS",
    "OVERRIDABLE_WEIGHTS",
    "Classifier",
    "Intent",
    "IntentResult",
    "IntentRouter",
    "apply_weight_override",
]


class Intent(enum.StrEnum):
    FACTUAL = "FACTUAL"
    CONVERSATIONAL = "CONVERSATIONAL"
    DOCUMENTARY = "DOCUMENTARY"
    EXPLORATORY = "EXPLORATORY"
    UNKNOWN = "UNKNOWN"


Source = Literal["regex", "llm", "cache", "none"]


@dataclass(frozen=True, slots=True)
class IntentResult:
    """A label with its confidence and the stage that produced it.

    source is "regex" (fast path), "llm" (the classifier was asked, whatever it answered),
    "cache" (a repeat of an earlier query) or "none" (no stage could run).
    """

    label: Intent
    confidence: float
    source: Source


Classifier = Callable[[str], str | None]
"""Stand-in for the LLM: takes the user message `Query: "<query>"`, returns the raw reply.

It may raise, return None or an empty string, or take longer than the timeout; each of
these yields UNKNOWN with confidence 0.
"""

_UNKNOWN_NONE: Final = IntentResult(Intent.UNKNOWN, 0.0, "none")
_UNKNOWN_LLM: Final = IntentResult(Intent.UNKNOWN, 0.0, "llm")


def _rule(words: tuple[str, ...], *, at_start: bool = False) -> re.Pattern[str]:
    # Whole words only; a phrase needs exactly one ASCII space between its words.
    alternatives = "|".join(re.escape(w).replace(r"\ ", " ") for w in words)
    anchor = "^" if at_start else r"\b"
    return re.compile(rf"{anchor}(?:{alternatives})\b", re.IGNORECASE)


# Order matters: the first rule that matches wins (so "Where is the PDF?" is DOCUMENTARY).
_RULES: Final[tuple[tuple[Intent, re.Pattern[str]], ...]] = (
    (Intent.DOCUMENTARY, _rule(("doc", "document", "resume", "pdf", "file", "attachment",
                                "upload", "link", "contract", "spreadsheet"))),
    (Intent.CONVERSATIONAL, _rule(("remember", "recall", "chatted", "said", "told",
                                   "last time", "yesterday", "conversation", "discussed",
                                   "talked"))),
    (Intent.FACTUAL, _rule(("what is", "what's", "whats", "when", "where", "how many",
                            "what was", "who is", "who's", "whos", "pin", "password",
                            "code", "api key"), at_start=True)),
    (Intent.EXPLORATORY, _rule(("think about", "thoughts on", "summarize", "overview",
                                "tell me about", "what do i know"))),
)

OVERRIDABLE_WEIGHTS: Final = ("alpha_dense", "beta_bm25", "gamma_graph", "delta_personal")

INTENT_DELTAS: Final[Mapping[Intent, Mapping[str, float]]] = {
    Intent.FACTUAL: {"alpha_dense": 0.10, "beta_bm25": 0.10, "gamma_graph": -0.10,
                     "delta_personal": 0.0},
    Intent.CONVERSATIONAL: {"alpha_dense": 0.0, "beta_bm25": 0.0, "gamma_graph": 0.15,
                            "delta_personal": 0.0},
    Intent.DOCUMENTARY: {"alpha_dense": 0.0, "beta_bm25": 0.0, "gamma_graph": 0.10,
                         "delta_personal": 0.0},
    Intent.EXPLORATORY: {"alpha_dense": 0.0, "beta_bm25": 0.0, "gamma_graph": 0.0,
                         "delta_personal": 0.0},
    Intent.UNKNOWN: {"alpha_dense": 0.0, "beta_bm25": 0.0, "gamma_graph": 0.0,
                     "delta_personal": 0.0},
}
"""Additive deltas per label, keyed by `RetrievalConfig` field name (MSPR.md 11.2)."""

EDGE_TYPE_PRIORS: Final[Mapping[Intent, Mapping[EdgeType, float]]] = {
    Intent.FACTUAL: {},
    Intent.CONVERSATIONAL: {EdgeType.REPLY_TO: 1.25, EdgeType.TEMPORAL_NEXT: 1.25},
    Intent.DOCUMENTARY: {EdgeType.DOCUMENT_LINK: 1.5},
    Intent.EXPLORATORY: {},
    Intent.UNKNOWN: {},
}
"""Declared edge-weight multipliers per label. The library never applies them (quirk 9)."""


def _clamp_unit(x: float) -> float:
    # The library's order, min first: NaN comes out as 1.0 (max(0, min(1, nan)) == 1.0).
    return max(0.0, min(1.0, x))


def apply_weight_override(cfg: RetrievalConfig, label: Intent) -> RetrievalConfig:
    """Move α/β/γ/δ by the label's deltas, each clamped to [0, 1].

    Returns `cfg` itself when the label changes nothing (EXPLORATORY, UNKNOWN), else a copy.
    """
    if all(delta == 0.0 for delta in INTENT_DELTAS[label].values()):
        return cfg
    moved = override_weights(label, {"alpha_dense": cfg.alpha_dense,
                                     "beta_bm25": cfg.beta_bm25,
                                     "gamma_graph": cfg.gamma_graph,
                                     "delta_personal": cfg.delta_personal})
    return dataclasses.replace(cfg, alpha_dense=moved["alpha_dense"],
                               beta_bm25=moved["beta_bm25"], gamma_graph=moved["gamma_graph"],
                               delta_personal=moved["delta_personal"])


def override_weights(label: Intent, weights: Mapping[str, float]) -> dict[str, float]:
    """`weights` with the label's deltas added, each moved weight clamped to [0, 1].

    The arithmetic of `apply_weight_override`, without building a configuration (the
    batch scorer calls it for every trial).
    """
    deltas = INTENT_DELTAS[label]
    return {name: old if deltas.get(name, 0.0) == 0.0 else _clamp_unit(old + deltas[name])
            for name, old in weights.items()}


class IntentRouter:
    """Classify queries, caching every answer by the stripped query text.

    The cache is cleared completely when full, and `cache_size=0` turns it off. The router
    does not look at `cfg.enabled`; deciding whether to route at all is the caller's job.
    """

    def __init__(self, cfg: IntentConfig, classifier: Classifier | None = None) -> None:
        self._cfg = cfg
        self._classifier = classifier
        self._cache: dict[str, IntentResult] = {}

    def classify(self, query: object) -> IntentResult:
        """Label `query`; never raises. Non-str or blank queries are UNKNOWN and not cached."""
        if not isinstance(query, str) or not query.strip():
            return _UNKNOWN_NONE
        key = query.strip()
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        result = self._classify_uncached(key)
        if self._cfg.cache_size > 0:
            if len(self._cache) >= self._cfg.cache_size:
                self._cache.clear()
            # Stored as repeats return it (frozen, so one object serves every repeat).
            self._cache[key] = dataclasses.replace(result, source="cache")
        return result

    def clear_cache(self) -> None:
        self._cache.clear()

    def _classify_uncached(self, query: str) -> IntentResult:
        if self._cfg.enable_regex_fastpath:
            for label, pattern in _RULES:
                if pattern.search(query):
                    return IntentResult(label, 1.0, "regex")
        # "llm" and "hybrid" behave identically (quirk 10).
        if self._cfg.strategy in ("llm", "hybrid") and self._classifier is not None:
            return _ask_classifier(self._classifier, query, self._cfg.llm_timeout_seconds)
        return _UNKNOWN_NONE


def _ask_classifier(classifier: Classifier, query: str, timeout: float) -> IntentResult:
    reply: list[object] = [None]

    def call() -> None:
        # Any failure of the stand-in LLM means "no answer", as in the library.
        try:
            reply[0] = classifier(f'Query: "{query}"')
        except Exception:
            reply[0] = None

    # A daemon thread, so a classifier that hangs cannot block the search or interpreter
    # exit; like the library, the late thread is left running, not cancelled.
    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    worker.join(timeout)
    if worker.is_alive() or not reply[0]:
        return _UNKNOWN_LLM
    return _parse_reply(reply[0])


def _parse_reply(text: object) -> IntentResult:
    """Read `{"intent": LABEL, "confidence": x}`; anything unreadable is UNKNOWN/0."""
    if not isinstance(text, str | bytes | bytearray):
        return _UNKNOWN_LLM
    try:
        parsed = json.loads(text)
    except (ValueError, RecursionError):
        return _UNKNOWN_LLM  # includes replies wrapped in a ``` code fence
    if not isinstance(parsed, dict):
        return _UNKNOWN_LLM
    try:
        label = Intent(str(parsed.get("intent", "UNKNOWN")).upper().strip())
    except ValueError:
        label = Intent.UNKNOWN
    try:
        confidence = float(parsed.get("confidence", 0.5))
    except (TypeError, ValueError, OverflowError):
        return _UNKNOWN_LLM  # null, a list, "high", 1e400 as an int, ...
    return IntentResult(label, _clamp_unit(confidence), "llm")
