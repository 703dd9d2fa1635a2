"""RQ entry points of the code loop, on the `local` queue (the host with the worktrees)."""
from __future__ import annotations

from services.agents import implementation


def run_test_step(run_id: str) -> str:
    """Run the repository's tests for one test-step run and post its verdict."""
    return implementation.run_test_step(run_id)


def remove_workspace(experiment_id: str) -> bool:
    """Delete a closed experiment's worktree."""
    return implementation.remove_workspace(experiment_id)
