"""services.workflow.runs.as_tree: an experiment's runs as orchestrator → the runs it started → theirs."""
from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

from models import AgentRun
from services.workflow.runs import as_tree

T0 = datetime(2026, 12, 1, tzinfo=timezone.utc)


def _run(name: str, minute: int, parent=None) -> AgentRun:
    return AgentRun(id=uuid.uuid4(), agent=name, parent_run_id=parent.id if parent else None,
                    created_at=T0 + timedelta(minutes=minute))


def test_children_follow_their_parent_in_the_order_they_ran():
    planner = _run("planner", 0)
    orchestrator = _run("orchestrator", 5)
    coder = _run("coder", 6, orchestrator)
    reviewer = _run("reviewer", 8, orchestrator)
    dispatch = _run("provisioner", 9, coder)
    newest_first = [dispatch, reviewer, coder, orchestrator, planner]
    tree = [(run.agent, depth) for run, depth in as_tree(newest_first)]
    assert tree == [("orchestrator", 0), ("coder", 1), ("provisioner", 2), ("reviewer", 1), ("planner", 0)]


def test_a_run_whose_parent_is_not_listed_is_top_level():
    outside = _run("elsewhere", 0)
    child = _run("child", 1, outside)
    assert [(run.agent, depth) for run, depth in as_tree([child])] == [("child", 0)]
