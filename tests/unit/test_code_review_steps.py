"""The code loop's review decisions and findings (services.agents.implementation), read from
plain events: no database, no agents."""
from __future__ import annotations

import pytest

from models import WorkflowEvent
from services.agents import implementation as impl


@pytest.mark.parametrize("code_round, verdicts, outcome", [
    (1, {"a": "pass", "b": "pass"}, impl.TO_TESTING),
    (1, {"a": "pass", "b": "needs_targeted_fix"}, impl.NEXT_ROUND),
    (2, {"a": "needs_targeted_fix", "b": "needs_targeted_fix"}, impl.NEXT_ROUND),
    (3, {"a": "pass", "b": "needs_targeted_fix"}, impl.RECONCILE),  # no fourth round
    (1, {"a": "pass", "b": "blocked_needs_user_decision"}, impl.RECONCILE),
    (1, {"a": "fail_not_worth_continuing", "b": "pass"}, impl.RECONCILE),
])
def test_what_the_review_pair_leads_to(code_round, verdicts, outcome):
    """Both pass → tests; a fix → next round; a serious verdict or round 3 → the reconciler?"""
    assert impl.review_outcome(code_round, verdicts) == outcome


@pytest.mark.parametrize("code_round, decision, outcome", [
    (1, "pass", impl.TO_TESTING),
    (2, "needs_targeted_fix", impl.NEXT_ROUND),
    (3, "needs_targeted_fix", impl.APPLY_RECONCILED_FIX),
    (1, "blocked_needs_user_decision", impl.BLOCK),
    (3, None, impl.BLOCK),
])
def test_what_the_reconcilers_decision_leads_to(code_round, decision, outcome):
    """pass → tests; a fix → next round, or after round 3 the one fix unreviewed; else block?"""
    assert impl.reconciler_outcome(code_round, decision) == outcome


def review(marker: str, code_round: int, verdict: str, fix: str = "", note: str | None = None) -> WorkflowEvent:
    return WorkflowEvent(marker=marker, note=note, metadata_={"review": {
        "round": code_round, "verdict": verdict, "review_pair": "code_review", "required_fix": fix}})


def test_findings_list_what_the_round_asked_for():
    """Are the latest non-passing reviews of that round, the reconciler and failed tests listed?"""
    cycle = [
        review("epm:code-review", 1, "needs_targeted_fix", "old advice"),
        review("epm:code-review", 1, "needs_targeted_fix", "fix mean()"),
        review("epm:code-review-codex", 1, "pass"),
        review("epm:code-review", 2, "needs_targeted_fix", "another round's fix"),
        WorkflowEvent(marker="epm:code-review-reconcile", note="apply the mean fix",
                      metadata_={"review": {"round": 1, "verdict": "needs_targeted_fix"}}),
        WorkflowEvent(marker="epm:test-verdict", metadata_={"round": 1, "verdict": "fail",
                                                            "commit": "0123456789abcdef", "output_tail": "1 failed"}),
    ]
    assert impl.findings_of_round(cycle, 1).split("\n") == [
        "- code-reviewer (needs_targeted_fix): fix mean()",
        "- reconciler decided: apply the mean fix",
        "- the tests failed on 0123456789ab:", "```", "1 failed", "```"]
    assert impl.findings_of_round(cycle, 3) == ""


def test_findings_fall_back_to_the_note_and_keep_a_failure_a_later_pass_follows():
    """Without a required_fix or reconciler_decision, is the event's note used; and does a failed
    test run stay listed when the same round later passes?"""
    cycle = [
        review("epm:code-review-codex", 2, "blocked_needs_user_decision", note="the baseline is wrong"),
        review("epm:code-review", 2, "pass"),
        WorkflowEvent(marker="epm:code-review-reconcile", note="ask the owner",
                      metadata_={"review": {"round": 2, "verdict": "blocked_needs_user_decision"}}),
        WorkflowEvent(marker="epm:test-verdict", metadata_={"round": 2, "verdict": "fail", "commit": "abc"}),
        WorkflowEvent(marker="epm:test-verdict", metadata_={"round": 2, "verdict": "pass", "commit": "def"}),
    ]
    assert impl.findings_of_round(cycle, 2).split("\n") == [
        "- code-plan-reviewer (blocked_needs_user_decision): the baseline is wrong",
        "- reconciler decided: ask the owner",
        "- the tests failed on abc:", "```", "", "```"]


def test_a_review_outside_the_code_review_pair_is_no_finding():
    """Is a review event for another pair (the plan review) left out of the code round's findings?"""
    other = WorkflowEvent(marker="epm:code-review", metadata_={"review": {
        "round": 1, "verdict": "needs_targeted_fix", "review_pair": "plan_review", "required_fix": "x"}})
    assert impl.findings_of_round([other], 1) == ""
