"""What happens after a move: each side-effect name of the transition table
(services/workflow/lifecycle.py TRANSITIONS, SPEC §2.3) and of the effects services return themselves,
mapped to the functions that carry it out, in one table — plus the guards checked before a move
and the writes made within it.

lifecycle cannot import this module (every handler's module imports lifecycle), so create_app
calls `install()` once; it refuses to start when a name in the table of moves has no handler.
A handler receives (experiment_id, actor, metadata) after the move's transaction committed;
handlers of one name run in the order listed.
"""
from __future__ import annotations

from typing import Callable

from services.agents import implementation
from services.day import todos
from services.dispatch import provisioner
from services.planning import follow_ups
from services.results import completion_audit, results
from services.workflow import email_notify, lifecycle, notify, orchestration

HANDLERS: dict[str, tuple[Callable, ...]] = {
    # Moves of the table.
    "start_planner_clarify": (orchestration.on_start_planner_clarify,),
    "start_planner_plan": (orchestration.on_start_planner_plan,),
    "redispatch_planner_with_answers": (orchestration.on_redispatch_planner_with_answers,),
    "redispatch_planner_with_note": (orchestration.on_redispatch_planner_with_note,),
    "wake_orchestrator": (orchestration.on_wake_orchestrator,),
    "request_promotion": (results.on_request_promotion,),
    "propose_follow_ups": (follow_ups.start_proposer,),
    "promote": (implementation.on_close_remove_workspace, results.on_promote),
    "stop_active_work": (provisioner.on_stop_active_work, implementation.on_close_remove_workspace),
    # A guarded move with nothing to do after it: send_crash_to_code starts the next code
    # round in the move's own transaction.
    "back_to_code": (),
    # Effects that services return themselves, beside a move.
    "notify_owner": (notify.on_notify_owner, email_notify.on_move),
    "notify_failure": (email_notify.on_move,),
    "enqueue_run": (orchestration.on_enqueue_run,),
    "start_orchestrator": (orchestration.on_start_orchestrator,),
    "enqueue_dispatch": (provisioner.on_enqueue_dispatch,),
    "stop_run_pods": (provisioner.on_stop_run_pods,),
}

# Checks made before a move, keyed like the rule's side effect (lifecycle.GUARDS).
GUARDS: dict[str, tuple[Callable, ...]] = {
    "promote": (results.check_promotion,),
    "request_promotion": (completion_audit.guard_promotion,),
    "back_to_code": (lifecycle.guard_back_to_code,),
    "approve_plan": (lifecycle.guard_plan_approval,),
}


# Writes made inside the move's own transaction, keyed like the rule's side effect (lifecycle.IN_MOVE).
IN_MOVE: dict[str, tuple[Callable, ...]] = {
    "promote": (results.record_promotion,),
}

# Writes made inside every move's transaction (lifecycle.ON_EVERY_MOVE).
ON_EVERY_MOVE: tuple[Callable, ...] = (todos.follow_experiment,)


def missing_handlers() -> list[str]:
    """Side-effect names in the table of moves that nothing carries out."""
    named = {rule.side_effect for rule in lifecycle.TRANSITIONS if rule.side_effect}
    return sorted(named - HANDLERS.keys())


def install() -> None:
    """Give lifecycle the handlers and guards (create_app); refuse to start with a gap."""
    missing = missing_handlers()
    if missing:
        raise RuntimeError(f"The transition table names side effect(s) with no handler: {', '.join(missing)}; "
                           "add them to services/pipeline/side_effects.py HANDLERS.")
    lifecycle.SIDE_EFFECT_HOOKS.clear()
    lifecycle.SIDE_EFFECT_HOOKS.update({name: list(handlers) for name, handlers in HANDLERS.items()})
    lifecycle.GUARDS.clear()
    lifecycle.GUARDS.update({name: list(guards) for name, guards in GUARDS.items()})
    lifecycle.IN_MOVE.clear()
    lifecycle.IN_MOVE.update({name: list(writes) for name, writes in IN_MOVE.items()})
    lifecycle.ON_EVERY_MOVE[:] = ON_EVERY_MOVE
