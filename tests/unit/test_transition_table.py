"""The transition table of SPEC §2.3, read through `allowed_moves` (no database needed)."""
from __future__ import annotations

import pytest

from models import Experiment
from services.core import registry
from services.workflow import lifecycle


def moves(status: str, role: str, before_block: str | None = None) -> set[str]:
    probe = Experiment(status=status, status_before_block=before_block, number=1)
    return {m.to for m in lifecycle.allowed_moves(probe, role)}


def rule(status: str, to: str, role: str, before_block: str | None = None):
    probe = Experiment(status=status, status_before_block=before_block, number=1)
    return lifecycle.rule_for_move(probe, to, role)


def test_every_status_named_by_the_table_is_in_the_registry():
    """Does the transition table only name statuses from the one registry?"""
    for r in lifecycle.TRANSITIONS:
        assert r.sources <= set(registry.STATUS_NAMES)
        assert r.targets - {lifecycle.RETURN_FROM_BLOCK} <= set(registry.STATUS_NAMES)


def test_owner_moves_from_proposed():
    """From proposed, may the owner clarify, plan, block, or close, and nothing else?"""
    assert moves("proposed", "owner") == {"clarifying", "planning", "blocked", "cancelled",
                                          "archived", "done_experiment", "done_impl"}


@pytest.mark.parametrize("status", sorted(registry.NON_TERMINAL_STATUSES - {"blocked"}))
def test_anyone_may_block_a_non_terminal_experiment_with_a_note(status):
    """Can owner, agent and system all move any non-terminal status to blocked, note required?"""
    for role in ("owner", "agent", "system"):
        assert "blocked" in moves(status, role)
        assert rule(status, "blocked", role).note_required


@pytest.mark.parametrize("status", sorted(registry.TERMINAL_STATUSES))
def test_terminal_statuses_only_reopen(status):
    """From a terminal status, may only the owner reopen (proposed, planning, plan_pending) with a note?"""
    assert moves(status, "owner") == {"proposed", "planning", "plan_pending"}
    assert all(rule(status, to, "owner").note_required for to in ("proposed", "planning", "plan_pending"))
    assert moves(status, "agent") == set()
    assert moves(status, "system") == set()


def test_agents_cannot_approve_or_promote():
    """Are approval and promotion reserved to the owner (and auto-approve to the system)?"""
    assert "approved" not in moves("plan_pending", "agent")
    assert "approved" in moves("plan_pending", "owner")
    assert "approved" in moves("plan_pending", "system")
    assert not {"shared", "completed"} & moves("awaiting_promotion", "agent")
    assert {"shared", "completed"} <= moves("awaiting_promotion", "owner")


def test_awaiting_approval_behaves_like_plan_pending():
    """Does imported `awaiting_approval` offer the same owner moves as `plan_pending`?"""
    assert moves("awaiting_approval", "owner") == moves("plan_pending", "owner")


def test_reject_needs_a_note():
    """Is plan_pending → planning (reject) a note-required move?"""
    assert rule("plan_pending", "planning", "owner").note_required


@pytest.mark.parametrize("to", ["cancelled", "archived", "done_experiment", "done_impl"])
def test_closing_moves_are_owner_only_with_a_note(to):
    """Are cancel/archive/done moves reserved to the owner and note-required?"""
    assert to in moves("running", "owner")
    assert to not in moves("running", "agent")
    assert rule("running", to, "owner").note_required


def test_blocked_offers_return_to_the_status_before_block():
    """From blocked, may the owner return to the saved status (plus planning, plan_pending, approved)?"""
    assert moves("blocked", "owner", before_block="running") >= {"running", "planning",
                                                                  "plan_pending", "approved"}
    assert "running" not in moves("blocked", "owner", before_block="proposed")
    assert moves("blocked", "agent", before_block="running") == set()


def test_pod_watcher_may_only_move_queued_to_running():
    """Does the system role reach `running` only from `queued` (SPEC §2.3 lesson)?"""
    sources = {s for s in registry.STATUS_NAMES if "running" in moves(s, "system")}
    assert sources == {"queued"}


def test_no_owner_move_depends_on_the_kind():
    """The board makes each status's move menu once for all its cards (blueprints/board.py),
    which is right only while the owner's moves depend on the status alone, never on the
    experiment's kind: a kind-specific owner rule would show a survey an experiment's menu."""
    assert [rule for rule in lifecycle.TRANSITIONS if "owner" in rule.who and rule.kinds is not None] == []
