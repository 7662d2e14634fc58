"""Intent routing and the weight override (MSPR.md section 11, Example G)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from msprlab.engine.config import IntentConfig, RetrievalConfig
from msprlab.engine.graph import EdgeType
from msprlab.engine.intent import (
    EDGE_TYPE_PRIORS,
    INTENT_DELTAS,
    OVERRIDABLE_WEIGHTS,
    Intent,
    IntentResult,
    IntentRouter,
    apply_weight_override,
)

F, C, D, E, U = (Intent.FACTUAL, Intent.CONVERSATIONAL, Intent.DOCUMENTARY,
                 Intent.EXPLORATORY, Intent.UNKNOWN)

# Example G: base α .55, β .15, γ .30, δ .30.
EXAMPLE_G_BASE = RetrievalConfig(alpha_dense=0.55, beta_bm25=0.15, gamma_graph=0.30,
                                 delta_personal=0.30)

EXAMPLE_G_LABELS = [
    ("What is Alice's seat preference?", F),
    ("  what's my api key", F),
    ("Whats the wifi password", F),
    ("pin code for the garage", F),
    ("who's on call", F),
    ("how many flights did I book", F),
    ("Tell me what is my PIN", U),
    ("How much did I spend", U),
    ("find the documents I uploaded", U),
    ("summarise my week", U),
    ("Where is the PDF I uploaded?", D),
    ("When is the contract due?", D),
    ("What did we discuss yesterday?", C),
    ("Remind me what you said about Tokyo", C),
    ("last time we talked", C),
    ("Summarize my thoughts on work", E),
    ("What do I know about Python?", E),
]

# (α, β, γ, δ) after the override of EXAMPLE_G_BASE; None means "the same object".
EXAMPLE_G_WEIGHTS: dict[Intent, tuple[float, float, float, float] | None] = {
    F: (0.65, 0.25, 0.19999999999999998, 0.30),
    C: (0.55, 0.15, 0.44999999999999996, 0.30),
    D: (0.55, 0.15, 0.4, 0.30),
    E: None,
    U: None,
}


def weights(cfg: RetrievalConfig) -> tuple[float, float, float, float]:
    return (cfg.alpha_dense, cfg.beta_bm25, cfg.gamma_graph, cfg.delta_personal)


def regex_router(**overrides: Any) -> IntentRouter:
    return IntentRouter(dataclasses.replace(IntentConfig(), **overrides))


class Scripted:
    """A classifier that records what it was asked and answers from a script."""

    def __init__(self, reply: str | None = None, *, error: Exception | None = None) -> None:
        self.reply = reply
        self.error = error
        self.asked: list[str] = []

    def __call__(self, message: str) -> str | None:
        self.asked.append(message)
        if self.error is not None:
            raise self.error
        return self.reply


def llm_router(classifier: Scripted, **overrides: Any) -> IntentRouter:
    cfg = dataclasses.replace(IntentConfig(strategy="llm"), **overrides)
    return IntentRouter(cfg, classifier)


# --- Example G --------------------------------------------------------------------------

@pytest.mark.parametrize(("query", "label"), EXAMPLE_G_LABELS)
def test_example_g_label(query: str, label: Intent) -> None:
    result = regex_router().classify(query)
    if label is U:
        assert result == IntentResult(U, 0.0, "none")
    else:
        assert result == IntentResult(label, 1.0, "regex")


@pytest.mark.parametrize(("query", "label"), [*EXAMPLE_G_LABELS, ("", U)])
def test_example_g_weights(query: str, label: Intent) -> None:
    result = regex_router().classify(query)
    assert result.label is label
    overridden = apply_weight_override(EXAMPLE_G_BASE, result.label)
    expected = EXAMPLE_G_WEIGHTS[label]
    if expected is None:
        assert overridden is EXAMPLE_G_BASE
    else:
        assert overridden is not EXAMPLE_G_BASE
        assert weights(overridden) == expected  # exact float equality


@pytest.mark.parametrize(("label", "expected"), [
    (F, (0.65, 0.25, 0.19999999999999998, 0.0)),
    (C, (0.55, 0.15, 0.44999999999999996, 0.0)),
    (D, (0.55, 0.15, 0.4, 0.0)),
])
def test_override_of_library_defaults(label: Intent,
                                      expected: tuple[float, float, float, float]) -> None:
    assert weights(apply_weight_override(RetrievalConfig(), label)) == expected


def test_factual_override_clamps_to_unit_interval() -> None:
    cfg = RetrievalConfig(alpha_dense=0.95, beta_bm25=1.0, gamma_graph=0.05)
    assert weights(apply_weight_override(cfg, F)) == (1.0, 1.0, 0.0, 0.0)


@pytest.mark.parametrize("label", list(Intent))
def test_override_never_touches_other_fields(label: Intent) -> None:
    cfg = RetrievalConfig(epsilon_frequency=0.2, zeta_success=0.7, seed_top_k=7,
                          algorithm="ppr")
    overridden = apply_weight_override(cfg, label)
    untouched = [f.name for f in dataclasses.fields(cfg) if f.name not in OVERRIDABLE_WEIGHTS]
    assert {n: getattr(overridden, n) for n in untouched} == \
        {n: getattr(cfg, n) for n in untouched}
    assert cfg == RetrievalConfig(epsilon_frequency=0.2, zeta_success=0.7, seed_top_k=7,
                                  algorithm="ppr")


def test_tables_cover_every_label() -> None:
    assert set(INTENT_DELTAS) == set(Intent) == set(EDGE_TYPE_PRIORS)
    assert all(tuple(d) == OVERRIDABLE_WEIGHTS for d in INTENT_DELTAS.values())
    assert EDGE_TYPE_PRIORS[C] == {EdgeType.REPLY_TO: 1.25, EdgeType.TEMPORAL_NEXT: 1.25}
    assert EDGE_TYPE_PRIORS[D] == {EdgeType.DOCUMENT_LINK: 1.5}
    assert EDGE_TYPE_PRIORS[F] == EDGE_TYPE_PRIORS[E] == EDGE_TYPE_PRIORS[U] == {}


# --- regex fast path --------------------------------------------------------------------

@pytest.mark.parametrize(("query", "label"), [
    ("notes from yesterday's meeting", C),       # a straight apostrophe is a word boundary
    ("YESTERDAY", C),
    ("documents", U), ("uploaded", U), ("files", U), ("summarise", U),  # inflections miss
    ("links and docs", U),
    ("last  time", U),                            # phrases need exactly one space
    ("thoughts\ton work", U),
    ("whenever you like", U),                     # whole words only
    ("codes", U),
    ("code red", F),
    ("API KEY rotation", F),
    ("tell me the password", U),                  # FACTUAL fires only at the start
    ("the password: what is it", U),
    ("my resume", D),
    ("(pdf)", D),
    ("remember the doc", D),                      # DOCUMENTARY is tried before CONVERSATIONAL
    ("when did we talk about the overview", F),   # FACTUAL before EXPLORATORY
    ("when we talked", C),                        # CONVERSATIONAL before FACTUAL
    ("an overview please", E),
])
def test_regex_rules(query: str, label: Intent) -> None:
    assert regex_router().classify(query).label is label


@pytest.mark.parametrize("strategy", ["regex", "llm", "hybrid"])
def test_fast_path_off_without_a_classifier_is_always_unknown(strategy: str) -> None:
    router = regex_router(enable_regex_fastpath=False, strategy=strategy)
    for query, _ in EXAMPLE_G_LABELS:
        assert router.classify(query) == IntentResult(U, 0.0, "none")


def test_regex_strategy_with_fast_path_off_never_asks_the_classifier() -> None:
    classifier = Scripted('{"intent": "FACTUAL", "confidence": 1}')
    router = llm_router(classifier, strategy="regex", enable_regex_fastpath=False)
    assert router.classify("What is my PIN?") == IntentResult(U, 0.0, "none")
    assert classifier.asked == []


# --- cache ------------------------------------------------------------------------------

@pytest.mark.parametrize("query", [None, 42, b"what is x", "", "   ", "\t\n"])
def test_non_str_or_blank_is_unknown(query: object) -> None:
    assert regex_router().classify(query) == IntentResult(U, 0.0, "none")


def test_cache_key_is_the_stripped_query_case_sensitive() -> None:
    router = regex_router()
    assert router.classify("  what is x ").source == "regex"
    assert router.classify("what is x") == IntentResult(F, 1.0, "cache")
    assert router.classify("What is x").source == "regex"
    assert router.classify("what  is x").source == "none"   # inner whitespace is kept


def test_full_cache_is_cleared_completely() -> None:
    router = regex_router(cache_size=2)
    sources = [router.classify(q).source for q in
               ["what is a", "what is b", "what is c", "what is b", "what is c",
                "what is a", "what is b"]]
    # "c" finds {a, b} full and clears it; "b" returns; "a" finds {c, b} full and clears.
    assert sources == ["regex", "regex", "regex", "regex", "cache", "regex", "regex"]


def test_blank_and_non_str_queries_are_not_cached() -> None:
    router = regex_router(cache_size=1)
    router.classify("what is a")
    router.classify("   ")
    router.classify(None)
    # Had either been stored, the full cache would have been cleared.
    assert router.classify("what is a").source == "cache"


def test_cache_size_zero_turns_the_cache_off() -> None:
    classifier = Scripted('{"intent": "EXPLORATORY"}')
    router = llm_router(classifier, cache_size=0)
    results = [router.classify("hello") for _ in range(3)]
    assert results == [IntentResult(E, 0.5, "llm")] * 3
    assert len(classifier.asked) == 3


def test_llm_unknowns_are_cached_too() -> None:
    classifier = Scripted(error=RuntimeError("provider down"))
    router = llm_router(classifier)
    assert router.classify("hello") == IntentResult(U, 0.0, "llm")
    assert router.classify(" hello ") == IntentResult(U, 0.0, "cache")
    assert len(classifier.asked) == 1
    router.clear_cache()
    router.classify("hello")
    assert len(classifier.asked) == 2


# --- LLM stage --------------------------------------------------------------------------

@pytest.mark.parametrize(("reply", "label", "confidence"), [
    ('{"intent":"exploratory","confidence":1.7}', E, 1.0),        # Example G
    ('```json\n{"intent": "FACTUAL", "confidence": 0.9}\n```', U, 0.0),  # code fence
    ('{"intent": "factual"}', F, 0.5),                            # confidence absent
    ('{"intent": "factual", "confidence": null}', U, 0.0),        # not numeric
    ('{"intent": "factual", "confidence": "high"}', U, 0.0),
    ('{"intent": "factual", "confidence": [0.4]}', U, 0.0),
    ('{"intent": "factual", "confidence": "0.25"}', F, 0.25),     # float() accepts it
    ('{"intent": "factual", "confidence": true}', F, 1.0),
    ('{"intent": "factual", "confidence": -3}', F, 0.0),
    ('{"intent": "factual", "confidence": NaN}', F, 1.0),         # the library's clamp order
    ('{"intent": " Documentary ", "confidence": 0.8}', D, 0.8),
    ('{"intent": "chit-chat", "confidence": 0.3}', U, 0.3),       # unknown label keeps conf
    ('{"intent": null, "confidence": 0.9}', U, 0.9),
    ('{"confidence": 0.3}', U, 0.3),
    ("{}", U, 0.5),
    ("[]", U, 0.0),
    ("null", U, 0.0),
    ("FACTUAL", U, 0.0),
    ("", U, 0.0),
    (None, U, 0.0),
])
def test_llm_reply_parsing(reply: str | None, label: Intent, confidence: float) -> None:
    router = llm_router(Scripted(reply))
    assert router.classify("Remind me of the thing") == IntentResult(label, confidence, "llm")


def test_classifier_gets_the_stripped_query_in_the_library_template() -> None:
    classifier = Scripted('{"intent": "CONVERSATIONAL", "confidence": 0.75}')
    router = llm_router(classifier, strategy="hybrid")
    assert router.classify('  say "hi" ') == IntentResult(C, 0.75, "llm")
    assert classifier.asked == ['Query: "say "hi""']


def test_classifier_runs_only_when_the_fast_path_misses() -> None:
    classifier = Scripted('{"intent": "EXPLORATORY", "confidence": 1}')
    router = llm_router(classifier)
    assert router.classify("What is my PIN?") == IntentResult(F, 1.0, "regex")
    assert classifier.asked == []
    off = llm_router(classifier, enable_regex_fastpath=False)
    assert off.classify("What is my PIN?") == IntentResult(E, 1.0, "llm")


def test_classifier_exception_is_unknown() -> None:
    router = llm_router(Scripted(error=ValueError("bad key")))
    assert router.classify("hello") == IntentResult(U, 0.0, "llm")


@pytest.fixture
def gate() -> Iterator[threading.Event]:
    event = threading.Event()
    yield event
    event.set()  # let the abandoned daemon thread finish


def test_classifier_slower_than_the_timeout_is_unknown(gate: threading.Event) -> None:
    finished = threading.Event()

    def slow(message: str) -> str:
        gate.wait(5.0)
        finished.set()
        return '{"intent": "FACTUAL", "confidence": 1.0}'

    router = IntentRouter(IntentConfig(strategy="llm", llm_timeout_seconds=0.05), slow)
    assert router.classify("hello") == IntentResult(U, 0.0, "llm")
    assert not finished.is_set()       # the call was abandoned, not awaited
    gate.set()
    assert finished.wait(5.0)
    assert router.classify("hello") == IntentResult(U, 0.0, "cache")  # the late answer is lost
