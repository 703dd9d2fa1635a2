"""The steps of `lifecycle.transition` that need no database: who may move, what is written,
what runs after."""
from __future__ import annotations

import pytest

from models import Experiment
from services.core.actors import Actor
from services.core.errors import Conflict, Forbidden, ValidationError
from services.workflow import lifecycle

OWNER, AGENT, TOKEN = Actor("owner", "1", "owner"), Actor("agent", "2", "planner"), Actor("token", "3", "ci")


def probe(status: str) -> Experiment:
    return Experiment(status=status, number=7)


def test_only_the_owner_overrides_an_unfinished_experiment_with_a_note():
    """Is an override refused to others, on a finished experiment, and without a note?"""
    lifecycle.check_override(probe("running"), "owner", "stuck pod")
    with pytest.raises(Forbidden):
        lifecycle.check_override(probe("running"), "agent", "stuck pod")
    with pytest.raises(ValidationError, match="reopened, not overridden"):
        lifecycle.check_override(probe("shared"), "owner", "why")
    with pytest.raises(ValidationError, match="needs a note"):
        lifecycle.check_override(probe("running"), "owner", None)


def test_a_move_outside_the_table_is_refused_with_the_allowed_ones():
    """Does an agent moving proposed → shared get a Conflict listing what it may do?"""
    with pytest.raises(Conflict) as refused:
        lifecycle.rule_allowing(probe("proposed"), "shared", AGENT)
    assert "cannot move from proposed to shared as agent" in refused.value.message
    assert "clarifying" in refused.value.details["allowed"]


def test_a_token_with_the_promote_scope_may_promote_and_no_more():
    """Does the promote scope open awaiting_promotion → shared to a token, and nothing else?"""
    assert lifecycle.rule_allowing(probe("awaiting_promotion"), "shared", TOKEN, "promote").side_effect == "promote"
    with pytest.raises(Conflict):
        lifecycle.rule_allowing(probe("awaiting_promotion"), "shared", TOKEN)
    with pytest.raises(Conflict):
        lifecycle.rule_allowing(probe("plan_pending"), "approved", TOKEN, "promote")


def test_blocking_remembers_where_to_return_and_unblocking_forgets():
    """Does a block save the status before it, and leaving blocked clear it?"""
    assert lifecycle.status_values("blocked", "running")["status_before_block"] == "running"
    assert lifecycle.status_values("running", "blocked")["status_before_block"] is None
    assert "status_before_block" not in lifecycle.status_values("uploading", "running")


def test_effects_are_the_rules_and_the_owners_notification():
    """Does a move carry its rule's side effect, and one into an owner turn a notification?"""
    rule = lifecycle.rule_allowing(probe("proposed"), "clarifying", OWNER)
    effects = lifecycle.effects_of_move(rule, "clarifying", "id-1", OWNER, {"via": "board"}, "go")
    assert [(e.name, e.metadata) for e in effects] == [("start_planner_clarify", {"via": "board", "note": "go"})]
    overridden = lifecycle.effects_of_move(None, "plan_pending", "id-1", OWNER, {"override": True}, "fix")
    assert [(e.name, e.metadata) for e in overridden] == [("notify_owner", {"status": "plan_pending"})]
