"""msprlab.experiments.parity.scenario_diff on hand-made outputs: what counts as a divergence."""

from __future__ import annotations

from typing import Any

import pytest

from msprlab.experiments.parity.scenario_diff import (
    BFS_TOLERANCE,
    PPR_TOLERANCE,
    Divergence,
    diff_outputs,
    format_divergences,
    tolerance_for,
)


def row(memory_id: str, score: float | None, **terms: Any) -> dict[str, Any]:
    """One search result with a full breakdown; `terms` overrides single fields."""
    return {"id": memory_id, "score": score, "dense": 0.5, "lexical": 0.25, "graph": 1.0,
            "frequency": 0.0, "personal": 0.0, "success": 0.0, "was_seed": True, **terms}


def search(*rows: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "search", "results": list(rows), "swallowed": [], **extra}


def feedback(result: dict[str, Any] | None) -> dict[str, Any]:
    return {"type": "feedback", "result": result, "swallowed": []}


def output(*events: dict[str, Any], final_nodes: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "format": "ck-mspr-oracle-output/1",
        "events": [{"index": i, **e} for i, e in enumerate(events)],
        "final_nodes": final_nodes if final_nodes is not None else {"m1": node()},
    }


def node(**fields: Any) -> dict[str, Any]:
    return {"relevance": 0.5, "relevance_floor": 0.0, "access_count": 1, "helpful_count": 0,
            "unhelpful_count": 0, "archived": False, **fields}


FEEDBACK = {"memory_id": "m1", "delta_applied": 0.15, "new_relevance": 0.65, "event_id": 1,
            "helpful": True}
REFERENCE = output(
    search(row("m1", 0.9), row("m2", 0.7), row("m3", 0.7), row("m4", 0.1), intent="FACTUAL"),
    feedback(FEEDBACK),
)


def kinds(divergences: list[Divergence]) -> list[str]:
    return [d.kind for d in divergences]


def test_identical_outputs_have_no_divergence() -> None:
    assert diff_outputs(REFERENCE, REFERENCE) == []


def test_permutation_inside_a_tie_is_not_a_divergence() -> None:
    got = output(
        search(row("m1", 0.9), row("m3", 0.7), row("m2", 0.7), row("m4", 0.1), intent="FACTUAL"),
        feedback(FEEDBACK),
    )
    assert diff_outputs(REFERENCE, got) == []


def test_scores_within_tie_tolerance_count_as_tied() -> None:
    want = output(search(row("a", 0.7), row("b", 0.7 + 3e-13), row("c", 0.7 - 3e-13)))
    got = output(search(row("c", 0.7 - 3e-13), row("a", 0.7), row("b", 0.7 + 3e-13)))
    assert diff_outputs(want, got) == []


def test_permutation_outside_a_tie_is_a_divergence() -> None:
    got = output(
        search(row("m2", 0.7), row("m1", 0.9), row("m3", 0.7), row("m4", 0.1), intent="FACTUAL"),
        feedback(FEEDBACK),
    )
    divergences = diff_outputs(REFERENCE, got)
    assert divergences == [Divergence(0, "order", "rank 1: expected ['m1'], got ['m2']")]


def test_a_tied_block_must_hold_the_same_ids() -> None:
    got = output(
        search(row("m1", 0.9), row("m2", 0.7), row("m4", 0.7), row("m3", 0.1), intent="FACTUAL"),
        feedback(FEEDBACK),
    )
    assert kinds(diff_outputs(REFERENCE, got)) == ["order"]


def test_bfs_score_off_by_2e_9_is_a_divergence() -> None:
    want = output(search(row("m1", 0.5)))
    got = output(search(row("m1", 0.5 + 2e-9)))
    divergences = diff_outputs(want, got, tolerance=BFS_TOLERANCE)
    assert kinds(divergences) == ["score"]
    assert "rank 1 (m1)" in divergences[0].message


def test_ppr_score_off_by_5e_7_is_within_tolerance() -> None:
    want = output(search(row("m1", 0.5, graph=0.25)))
    got = output(search(row("m1", 0.5 + 5e-7, graph=0.25 - 5e-7)))
    assert diff_outputs(want, got, tolerance=PPR_TOLERANCE) == []
    assert kinds(diff_outputs(want, got, tolerance=BFS_TOLERANCE)) == ["score", "breakdown"]


def test_error_against_results_is_a_divergence() -> None:
    want = output({"type": "search", "error": "ValueError: At least one of ..."})
    got = output(search(row("m1", 0.5)))
    assert kinds(diff_outputs(want, got)) == ["error"]
    assert kinds(diff_outputs(got, want)) == ["error"]


def test_errors_compare_by_exception_type_not_wording() -> None:
    library = output({"type": "search", "error": "ValueError: At least one of 'user_id' ..."})
    same_type = output({"type": "search", "error": "ValueError: no session id"})
    other_type = output({"type": "search", "error": "TypeError: '>=' not supported"})
    assert diff_outputs(library, same_type) == []
    assert kinds(diff_outputs(library, other_type)) == ["error"]


@pytest.mark.parametrize(
    ("changed", "kind"),
    [
        ({"dense": 0.6}, "breakdown"),
        ({"was_seed": False}, "was_seed"),
        ({"score": None}, "score"),
    ],
)
def test_each_result_field_is_compared(changed: dict[str, Any], kind: str) -> None:
    want = output(search(row("m1", 0.5)))
    got = output(search({**row("m1", 0.5), **changed}))
    assert kinds(diff_outputs(want, got)) == [kind]


def test_a_missing_breakdown_is_a_divergence() -> None:
    want = output(search(row("m1", 0.5)))
    got = output(search({"id": "m1", "score": 0.5}))  # the raw vector fallback has none
    assert set(kinds(diff_outputs(want, got))) == {"breakdown", "was_seed"}


def test_result_count_is_compared() -> None:
    want = output(search(row("m1", 0.5), row("m2", 0.4)))
    got = output(search(row("m1", 0.5)))
    assert kinds(diff_outputs(want, got)) == ["length"]


def test_intent_is_compared_only_when_both_sides_report_it() -> None:
    want = output(search(row("m1", 0.5), intent="FACTUAL"))
    assert kinds(diff_outputs(want, output(search(row("m1", 0.5), intent="UNKNOWN")))) == [
        "intent"]
    assert diff_outputs(want, output(search(row("m1", 0.5)))) == []


def test_feedback_none_against_a_result_is_a_divergence() -> None:
    assert kinds(diff_outputs(output(feedback(FEEDBACK)), output(feedback(None)))) == [
        "feedback"]
    assert diff_outputs(output(feedback(None)), output(feedback(None))) == []


def test_feedback_fields_compare_floats_with_tolerance_and_the_rest_exactly() -> None:
    near = {**FEEDBACK, "delta_applied": 0.15 + 1e-12}
    assert diff_outputs(output(feedback(FEEDBACK)), output(feedback(near))) == []
    unbumped = {**FEEDBACK, "new_relevance": None}
    renumbered = {**FEEDBACK, "event_id": 2}
    assert kinds(diff_outputs(output(feedback(FEEDBACK)), output(feedback(unbumped)))) == [
        "feedback"]
    assert kinds(diff_outputs(output(feedback(FEEDBACK)), output(feedback(renumbered)))) == [
        "feedback"]


def test_final_nodes_are_compared() -> None:
    want = output(final_nodes={"m1": node(), "m2": node()})
    got = output(final_nodes={"m1": node(access_count=2), "m3": node()})
    messages = [d.message for d in diff_outputs(want, got)]
    assert messages == [
        "nodes missing in got: ['m2']",
        "unexpected nodes in got: ['m3']",
        "m1: expected access_count 1, got 2",
    ]
    assert all(d.event_index is None for d in diff_outputs(want, got))


def test_event_count_and_types_are_compared() -> None:
    want = output(search(row("m1", 0.5)), feedback(None))
    assert kinds(diff_outputs(want, output(search(row("m1", 0.5))))) == ["events"]
    assert kinds(diff_outputs(want, output(feedback(None), feedback(None)))) == ["events"]


def test_negative_tolerance_is_rejected() -> None:
    with pytest.raises(ValueError, match="tolerance >= 0"):
        diff_outputs(REFERENCE, REFERENCE, tolerance=-1.0)


def test_tolerance_follows_the_scenario_algorithm() -> None:
    assert tolerance_for({"config": {"retrieval": {"algorithm": "ppr"}}}) == PPR_TOLERANCE
    assert tolerance_for({"config": {"retrieval": {"algorithm": "bfs"}}}) == BFS_TOLERANCE
    assert tolerance_for({}) == BFS_TOLERANCE


def test_report_shows_the_first_divergence_of_each_event_with_a_table() -> None:
    scenario = {"name": "scn_demo", "events": [
        {"type": "search", "query": "what is my pin"}, {"type": "feedback", "memory_id": "m1"}]}
    got = output(
        search(row("m2", 0.7), row("m1", 0.9), row("m3", 0.7), row("m4", 0.2), intent="FACTUAL"),
        feedback({**FEEDBACK, "delta_applied": 0.1}),
        final_nodes={"m1": node(archived=True)},
    )
    divergences = diff_outputs(REFERENCE, got)
    report = format_divergences(divergences, scenario=scenario, expected=REFERENCE, got=got)
    lines = report.splitlines()
    assert lines[0] == "3 divergences in 2 events of scn_demo"
    assert lines[1] == ("  event 0 (search 'what is my pin') [order] rank 1: "
                        "expected ['m1'], got ['m2']")
    assert lines[3].split() == ["*", "1", "m1", "0.9", "m2", "0.7"]
    assert "event 1 (feedback 'm1') [feedback] expected delta_applied 0.15, got 0.1" in report
    assert "[final_nodes] m1: expected archived False, got True" in report
    assert "rank 4" not in report  # only the first divergence of an event is shown


def test_report_of_no_divergences() -> None:
    assert format_divergences([]) == "no divergences"
