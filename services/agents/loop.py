"""The agent loop (SPEC §5.5, ARCHITECTURE §4): one job runs a run step by step.

A step is one model call plus its tool calls, committed before the next, so a crash loses
at most the step in flight and a parked run resumes from the database. Between steps the
loop checks the owner's cancel and the worker's shutdown request. A heartbeat thread
beside the loop writes `heartbeat_at` whatever the loop is doing, so a long model or tool
call never looks like a dead worker.
"""
from __future__ import annotations

import copy
import json
import logging
import uuid
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from flask import current_app

from models import AgentRun, ApprovalRequest, Experiment, RunEvent, WorkflowEvent, db
from services.agents import toolbox, web_tools
from services.agents.toolkit import ToolContext, ToolResult
from services.claude import loader, model_api
from services.core import registry
from services.core.actors import Actor
from services.core.clock import utcnow
from services.core.errors import SaganError
from services.core.redact import redact
from services.dispatch import recovery
from services.dispatch.pods import pods_of
from services.workflow import jobs, lifecycle, runs
from services.workflow.orchestration import agents_enabled, start_queued_planning
from services.workflow.parking import Heartbeat, ready_to_wake, wake_parent_if_ready
from services.workflow.parking import merge as merge_parks

log = logging.getLogger(__name__)

# Bounds of one step's model call: cut-off replies asked again with a higher output limit
# (model_api.next_max_tokens) and pause_turn continuations are bounded by max_turns.
ACTIVE = registry.RUN_ACTIVE_STATUSES


class ShutdownRequested(Exception):
    """The worker is stopping: park the run so another worker continues it."""


@dataclass
class Outcome:
    status: str
    detail: str = ""


def model_client():
    """The real Anthropic client, pointed at ANTHROPIC_BASE_URL when set (tests' fake server).

    The key travels in `x-api-key`, the header the API reference names for API keys (checked
    2026-12-02); the installed SDK (2.14) would send it as an `Authorization: Bearer` token,
    the form the docs give for OAuth tokens, so that header is left out.
    """
    import anthropic
    cfg = current_app.config
    key = cfg["ANTHROPIC_API_KEY"]
    return anthropic.Anthropic(api_key=key, base_url=cfg.get("ANTHROPIC_BASE_URL") or None,
                               max_retries=cfg.get("MODEL_MAX_RETRIES", 3),
                               timeout=cfg.get("MODEL_TIMEOUT_SECONDS", 600),
                               default_headers={"x-api-key": key, "Authorization": anthropic.Omit()})


# --- the brief ------------------------------------------------------------------------------

def build_brief(run: AgentRun, experiment: Experiment | None) -> str:
    """What the agent knows when it starts: the record, plan, answers, recent events, the task."""
    parts = []
    if experiment is not None:
        parts.append(f"# Experiment #{experiment.number}: {experiment.title}\n"
                     f"Status: {experiment.status} ({experiment.turn}). Kind: {experiment.kind}. "
                     f"Priority: {experiment.priority}. Account: {experiment.pod_account}.")
        if experiment.hypothesis:
            parts.append(f"## Hypothesis\n{experiment.hypothesis}")
        if experiment.git_branch or experiment.git_commit:
            parts.append(f"Code: branch {experiment.git_branch or '—'} commit {experiment.git_commit or '—'}")
        if experiment.plan_md:
            parts.append(f"## Current plan\n{experiment.plan_md[:60_000]}")
        recent = list(db.session.scalars(
            sa.select(WorkflowEvent).where(WorkflowEvent.entity_id == experiment.id)
            .order_by(WorkflowEvent.created_at.desc()).limit(30)))[::-1]
        if recent:
            lines = []
            for event in recent:
                label = event.marker or event.event_type
                move = f" {event.from_status}→{event.to_status}" if event.event_type == "state_changed" else ""
                meta = ""
                if event.marker in ("epm:clarify", "epm:clarify-answers", "epm:textbox-answers"):
                    meta = " " + json.dumps(event.metadata_ or {})[:4000]
                lines.append(f"- {event.created_at.isoformat()} {label}{move}: {event.note or ''}{meta}")
            parts.append("## Recent events (oldest first)\n" + "\n".join(lines))
    parts.append(f"## Your task\n{run.request}")
    return "\n\n".join(parts)


# --- cost ------------------------------------------------------------------------------------

def model_price(model: str) -> model_api.Price | None:
    return model_api.model_price(model)


def _add_usage(run: AgentRun, response) -> None:
    """Tokens of one call (cache writes and reads apart) and its cost at the model's price;
    once a call has no price the run's cost stays unknown (NULL), never $0.00."""
    usage = response.usage
    run.turns += 1
    run.input_tokens += model_api.usage_count(usage, "input_tokens")
    run.output_tokens += model_api.usage_count(usage, "output_tokens")
    run.cache_creation_input_tokens = (run.cache_creation_input_tokens or 0) + \
        model_api.usage_count(usage, "cache_creation_input_tokens")
    run.cache_read_input_tokens = (run.cache_read_input_tokens or 0) + \
        model_api.usage_count(usage, "cache_read_input_tokens")
    cost = model_api.cost(run.model, usage)
    run.cost_usd = None if cost is None or run.cost_usd is None else float(run.cost_usd) + cost


# --- the loop -----------------------------------------------------------------------------

def execute(run_id, *, should_stop=lambda: False) -> Outcome:
    """Run (or resume) one agent run until it ends, parks, or the worker stops."""
    run = db.session.get(AgentRun, uuid.UUID(str(run_id)))
    if run is None or run.terminal:
        return Outcome("skipped", "run missing or already finished")
    if run.status == "waiting" and not ready_to_wake(run):
        return Outcome("skipped", "still waiting")
    if run.cancel_requested_at is not None:
        effects = runs.finish_cancel(run, Actor.owner_like())
        db.session.commit()
        lifecycle.run_side_effects(effects)
        return Outcome("cancelled")
    if not agents_enabled():
        return _finish_failed(run, "model_api_error", "No ANTHROPIC_API_KEY is configured; agents cannot run.")

    try:
        definition = loader.get(run.agent)
    except SaganError as exc:  # a missing or broken agent definition fails this run, clearly
        return _finish_failed(run, "agent_error", f"Agent {run.agent!r} cannot start: {exc.message}")
    resuming = run.conversation is not None
    was_waiting = run.status == "waiting"
    # Claim the run: if two jobs exist for it (a retry, the reconciler), only one proceeds.
    if not runs.claim(run.id, ("queued", "waiting"), "running"):
        db.session.rollback()
        return Outcome("skipped", "another worker has this run")
    db.session.refresh(run)
    run.model = run.model or loader.model_for(definition)
    experiment = db.session.get(Experiment, run.scope_id) if run.scope_id else None
    if not resuming:
        runs.append_event(run.id, "started", f"kind={run.kind}", {"agent": run.agent, "model": run.model})
        run.conversation = [{"role": "user", "content": redact(build_brief(run, experiment))}]
    elif was_waiting:
        failed_dispatch = _failed_dispatch(run)
        wake_message = _resume_message(run)
        runs.append_event(run.id, "woken", wake_message[:2000])
        if failed_dispatch is not None:
            # The pods failed: the run fails with the dispatch's reason and evidence, so the
            # recovery budget decides what happens next (one recovery, or a blocker) — the
            # same rule for every failure (SPEC §7), not the model's judgement.
            run.waiting_for = None
            return _finish_failed(run, *failed_dispatch)
        _answer_parked_tools(run)
    else:
        # Resumed after a worker shutdown or crash: the same conversation, made valid to send.
        run.conversation = model_api.resumable(run.conversation)
    run.waiting_for = None
    run.wake_at = None
    db.session.commit()

    app = current_app._get_current_object()
    with Heartbeat(app, run.id, app.config["HEARTBEAT_SECONDS"]):
        try:
            return _steps(run, definition, should_stop)
        except ShutdownRequested:
            db.session.rollback()
            run = db.session.get(AgentRun, run.id)
            runs.set_status(run, "queued")
            runs.append_event(run.id, "waiting", "Worker shutting down; the run is queued for another worker.")
            db.session.commit()
            jobs_to_enqueue = [run.id]
            return _after_commit(Outcome("parked", "worker shutdown"), enqueue=jobs_to_enqueue)


def _steps(run: AgentRun, definition: loader.AgentDefinition, should_stop) -> Outcome:
    client = model_client()
    # Read once per job: the owner's web-tools switch applies from the run's next job on, so
    # one job's calls keep the same tools (and their cache prefix).
    api_tools = toolbox.request_tools(definition.tools)
    experiment = db.session.get(Experiment, run.scope_id) if run.scope_id else None
    while True:
        outcome = _before_turn(run, definition, should_stop)
        if outcome is None:
            outcome = _turn(client, run, definition, api_tools, experiment)
        if outcome is not None:
            return outcome


def _before_turn(run: AgentRun, definition: loader.AgentDefinition, should_stop) -> Outcome | None:
    """A cancel, a worker stop (raised) or the turn limit ends the run before the next model call."""
    db.session.refresh(run)
    if run.cancel_requested_at is not None:
        effects = runs.finish_cancel(run, Actor.owner_like())
        db.session.commit()
        lifecycle.run_side_effects(effects)
        return Outcome("cancelled")
    if should_stop():
        raise ShutdownRequested()
    if run.turns >= definition.max_turns:
        return _finish_failed(run, "max_turns", f"Reached the limit of {definition.max_turns} turns.")
    return None


def _turn(client, run: AgentRun, definition: loader.AgentDefinition, api_tools: list, experiment) -> Outcome | None:
    """One model turn and what its stop reason asks for; None when the loop goes on."""
    response = _model_turn(client, run, definition, api_tools)
    if isinstance(response, Outcome):
        return response
    blocks = model_api.stored_blocks(response.content)
    # The assistant turn is stored exactly as returned: thinking blocks and their
    # signatures must go back unchanged. Redaction applies to the events below (what
    # Sagan shows), and tool results are redacted before they enter the conversation.
    conversation = list(run.conversation) + [{"role": "assistant", "content": blocks}]
    run.conversation = conversation
    _record_blocks(run, blocks)
    action = model_api.stop_action(response.stop_reason)
    if action == "continue_turn":
        # pause_turn: the server paused a long turn; sending the conversation back as it
        # is (ending with this assistant turn) lets it continue where it stopped.
        db.session.commit()
        return None
    failure = stop_failure(action, response)
    if failure is not None:
        return _finish_failed(run, *failure)
    tool_uses = [b for b in blocks if b["type"] == "tool_use"]
    if action != "run_tools" or not tool_uses:
        return _finish_completed(run, final_text(blocks), response.stop_reason)
    return _run_tools(run, definition, experiment, tool_uses)


def stop_failure(action: str, response) -> tuple[str, str] | None:
    """The failure reason and message for a stop that ends the run failed: a refusal (never
    retried) or a stop reason Sagan does not know (nothing is assumed finished)."""
    if action == "fail_refusal":
        return ("model_refusal", "The model declined to continue this run "
                f"({model_api.refusal_detail(response)}). Sagan does not retry a refusal: "
                "rephrase the request or the experiment, then start the step again.")
    if action == "fail_unknown":
        return ("model_api_error", f"The model stopped for an unknown reason "
                f"{response.stop_reason!r}; nothing was assumed finished.")
    return None


def final_text(blocks: list[dict]) -> str:
    """The run's answer: the turn's text blocks, joined, with the web pages they cite listed
    after them (a run without web research cites none)."""
    text = "\n".join(b["text"] for b in blocks if b["type"] == "text").strip()
    return web_tools.with_text_sources(text, web_tools.sources([{"role": "assistant", "content": blocks}]))


def _model_turn(client, run: AgentRun, definition: loader.AgentDefinition, api_tools: list):
    """One model call for the next turn, or the Outcome that ends the run.

    A reply cut off by max_tokens is dropped and asked again with a higher output limit, up
    to the model's maximum output (then `output_limit`); a context window overflow trims old
    tool results once more and asks again (then `context_limit`).
    """
    import anthropic
    max_tokens = model_api.first_max_tokens(run.model)
    budget = current_app.config["AGENT_TOOL_RESULT_BUDGET_CHARS"]
    while True:
        conversation = copy.deepcopy(run.conversation)
        trimmed = model_api.trim_tool_results(conversation, budget)
        if trimmed:
            run.conversation = conversation
            runs.append_event(run.id, "notice", f"Sagan dropped {trimmed} old tool result(s) from the "
                              "context to stay within its size budget.", {"context_trim": trimmed})
        params = model_api.request(model=run.model, system=definition.prompt, tools=api_tools,
                                   messages=model_api.api_messages(run.conversation), effort=definition.effort,
                                   max_tokens=max_tokens)
        # No transaction stays open across the model call (it can take minutes): on SQLite
        # an open transaction holds the write lock, and on PostgreSQL a connection.
        db.session.commit()
        try:
            # Always streamed: the SDK refuses a non-streaming call whose max_tokens implies
            # more than ten minutes of output, and the ladder goes up to 128K.
            with client.messages.stream(**params) as stream:
                response = stream.get_final_message()
        except anthropic.APIStatusError as exc:
            if model_api.is_context_overflow(exc):
                if _can_trim_harder(run, budget):
                    budget //= 4
                    continue
                return _finish_failed(run, "context_limit", f"The conversation no longer fits the model's context "
                                      f"window and there is nothing left to trim: {_api_message(exc)}")
            return _finish_failed(run, "model_api_error",
                                  f"The model API answered {exc.status_code} after retries: {_api_message(exc)}")
        except anthropic.APIConnectionError as exc:
            return _finish_failed(run, "model_api_error", f"Could not reach the model API after retries: {exc}")
        _add_usage(run, response)
        action = model_api.stop_action(response.stop_reason)
        if action == "raise_output_limit":
            higher = model_api.next_max_tokens(max_tokens, run.model)
            if run.turns >= definition.max_turns:
                return _finish_failed(run, "max_turns", f"Reached the limit of {definition.max_turns} turns "
                                      "(the last reply was cut off by the output limit).")
            if higher is None:
                return _finish_failed(run, "output_limit", f"The model's reply was cut off at {max_tokens:,} output "
                                      "tokens, the most this model writes in one reply, so the step could not "
                                      "finish. Split the task into smaller steps (a shorter plan or fewer files "
                                      "per step) and start it again.")
            runs.append_event(run.id, "notice", f"The reply was cut off at {max_tokens:,} output tokens; "
                              f"asking again with a limit of {higher:,}.", {"output_limit": max_tokens})
            max_tokens = higher
            continue
        if action == "trim_context":
            if _can_trim_harder(run, budget):
                budget //= 4
                continue
            return _finish_failed(run, "context_limit", "The reply ran into the model's context window and there "
                                  "is nothing left to trim.")
        return response


def _can_trim_harder(run: AgentRun, budget: int) -> bool:
    """Would a quarter of the budget drop more old tool results (so asking again can help)?"""
    return budget > 1000 and model_api.trim_tool_results(copy.deepcopy(run.conversation), budget // 4) > 0


def _record_blocks(run: AgentRun, blocks: list[dict]) -> None:
    """Events for what the model said and asked: narration (summarized thinking) and text as
    assistant_text, tool calls as tool_call. append_event redacts what it stores."""
    for block in blocks:
        if block["type"] == "thinking" and (block.get("thinking") or "").strip():
            runs.append_event(run.id, "assistant_text", block["thinking"], {"thinking": True})
        elif block["type"] == "text" and block["text"].strip():
            runs.append_event(run.id, "assistant_text", block["text"])
        elif block["type"] == "tool_use":
            runs.append_event(run.id, "tool_call", block["name"], {"tool": block["name"], "input": block["input"],
                                                                   "tool_use_id": block["id"]})
        elif block["type"] == "server_tool_use":
            runs.append_event(run.id, "tool_call", block["name"], {"tool": block["name"], "input": block.get("input"),
                                                                   "server_tool": True})
        elif block["type"] in web_tools.RESULT_BLOCKS:
            summary, is_error = web_tools.describe_result(block)
            runs.append_event(run.id, "tool_result", summary, {"tool": web_tools.RESULT_BLOCKS[block["type"]],
                                                               "is_error": is_error, "server_tool": True,
                                                               "tool_use_id": block.get("tool_use_id")})


def _run_tools(run: AgentRun, definition: loader.AgentDefinition, experiment, tool_uses: list[dict]):
    """Run the tools the model asked for; the Outcome when the run finishes or parks."""
    # Commit what the model asked before doing it: recording events locks the run's row,
    # and a long tool call (a test suite in the sandbox) must not hold that lock, or the
    # heartbeat thread's update would wait behind it and the run would look dead.
    db.session.commit()
    ctx = ToolContext(run, experiment)
    results, effects, enqueue, parks, finish = [], [], [], [], False
    for block in tool_uses:
        if block["name"] in definition.tools:
            result = toolbox.call(ctx, block["name"], block["input"])
        else:
            # Agents act with their own tools only, whatever the model asks for (SPEC §5.5).
            result = ToolResult(f"{block['name']} is not one of this agent's tools "
                                      f"({', '.join(definition.tools)}).", is_error=True)
        runs.append_event(run.id, "tool_result", result.content,
                          {"tool": block["name"], "is_error": result.is_error, "tool_use_id": block["id"]})
        answer = {"type": "tool_result", "tool_use_id": block["id"], "content": result.api_content(),
                  "is_error": result.is_error}
        if result.park and result.park.get("children"):
            # Filled with these sub-agents' outcomes when the run wakes (_answer_parked_tools):
            # each call that started sub-agents gets their results as its own tool result.
            answer["_awaits"] = list(result.park["children"])
        results.append(answer)
        effects += result.effects
        enqueue += result.enqueue
        parks.append(result.park)
        finish = finish or result.finish
    # A turn that started two sub-agents waits for both (and for its dispatch, if it also
    # asked to wait for one): one wait holding every condition.
    park = merge_parks(parks)
    run.conversation = list(run.conversation) + [{"role": "user", "content": results}]
    if finish:
        outcome = _finish_completed(run, "Finished with the tool call above.", "tool_use")
        lifecycle.run_side_effects(effects)
        return outcome
    if park:
        run.status = "waiting"
        run.waiting_for = park
        if "until" in park:
            run.wake_at = datetime.fromisoformat(park["until"])
        runs.append_event(run.id, "waiting", _describe_wait(park), {"waiting_for": park})
    db.session.commit()
    lifecycle.run_side_effects(effects)
    for run_id in enqueue:
        jobs.enqueue_run(run_id)
    if park:
        return Outcome("waiting", _describe_wait(park))
    return None


def _api_message(exc) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        return str((body.get("error") or {}).get("message") or body)[:500]
    return str(exc)[:500]


def _describe_wait(park: dict) -> str:
    parts = []
    if "children" in park:
        parts.append(f"{len(park['children'])} sub-agent run(s)")
    if "pods" in park:
        parts.append("the pods to finish")
    if "until" in park and not parts:
        return f"waiting until {park['until']}"
    return "waiting for " + " and ".join(parts) if parts else "waiting"


def _after_commit(outcome: Outcome, *, enqueue=()) -> Outcome:
    for run_id in enqueue:
        jobs.enqueue_run(run_id)
    return outcome


def _cancelled_meanwhile(run: AgentRun) -> Outcome | None:
    """A cancel that landed during the last step (the owner's, or its parent's cancel): the
    run ends cancelled rather than completed or failed on top of it."""
    db.session.refresh(run, ["cancel_requested_at", "status"])
    if run.cancel_requested_at is None:
        return None
    if run.terminal:
        db.session.commit()
        return Outcome(run.status)
    effects = runs.finish_cancel(run, Actor.owner_like())
    db.session.commit()
    lifecycle.run_side_effects(effects)
    return Outcome("cancelled")


def _finish_completed(run: AgentRun, final: str, stop_reason: str | None) -> Outcome:
    runs.append_event(run.id, "sdk_result", f"stop_reason={stop_reason}", _usage_facts(run, stop_reason))
    cancelled = _cancelled_meanwhile(run)
    if cancelled is not None:
        return cancelled
    unfinished = _unfinished_job(run)
    if unfinished is not None:
        return _finish_failed(run, "run_incomplete", f"{unfinished} Its last words: {final or '(no final text)'}"[:4000])
    status = "completed"
    if run.kind == "plan" and _has_pending_approval(run):
        status = "awaiting_approval"  # the plan it wrote waits for the owner
    runs.set_status(run, status)
    runs.append_event(run.id, "completed", final or "(no final text)")
    parent_id = run.parent_run_id
    db.session.commit()
    if parent_id is not None:
        wake_parent_if_ready(parent_id)
    _start_queued_planning(run)
    return Outcome(status, final)


def _start_queued_planning(run: AgentRun) -> None:
    """A planning request the owner made while this planner was on its last turn starts now."""
    if run.kind != "plan" or run.parent_run_id is not None:
        return
    start_queued_planning(run)


def _usage_facts(run: AgentRun, stop_reason: str | None) -> dict:
    return {"input_tokens": run.input_tokens, "output_tokens": run.output_tokens,
            "cache_creation_input_tokens": run.cache_creation_input_tokens or 0,
            "cache_read_input_tokens": run.cache_read_input_tokens or 0,
            "cost_usd": None if run.cost_usd is None else round(float(run.cost_usd), 6), "turns": run.turns,
            "stop_reason": stop_reason, "price_unknown": run.cost_usd is None}


# The runs that exist to move their experiment on: when one ends, the experiment must be in
# the owner's turn (questions asked, a plan awaiting approval, a result to review) or have
# other work running — never in Sagan's turn with nothing running.
JOB_OF_KIND = {
    "plan": "The planner ended without asking the owner questions or submitting a valid plan.",
    "apply": "The orchestrator ended without handing the experiment to the owner or leaving work running.",
}


def _unfinished_job(run: AgentRun) -> str | None:
    """Why a finished top-level plan/apply run left its experiment stalled, or None."""
    if run.parent_run_id is not None or run.kind not in JOB_OF_KIND or run.scope_kind != "experiment":
        return None
    experiment = db.session.get(Experiment, run.scope_id) if run.scope_id else None
    if experiment is None:
        return None
    db.session.refresh(experiment)
    status = registry.STATUS_BY_NAME[experiment.status]
    if status.terminal or status.owner_turn:
        return None
    if run.kind == "plan" and _opened_approval(run):
        return None  # it wrote a plan; the owner may already have decided it (a rejection re-plans)
    others = db.session.scalar(sa.select(sa.func.count(AgentRun.id)).where(
        AgentRun.scope_kind == "experiment", AgentRun.scope_id == experiment.id, AgentRun.id != run.id,
        AgentRun.status.in_(ACTIVE + ("awaiting_approval",))))
    if others:
        return None
    return f"{JOB_OF_KIND[run.kind]} Experiment #{experiment.number} was left in {experiment.status} with nothing running."


def _opened_approval(run: AgentRun) -> bool:
    return db.session.scalar(sa.select(sa.func.count(ApprovalRequest.id)).where(
        ApprovalRequest.agent_run_id == run.id)) > 0


def _has_pending_approval(run: AgentRun) -> bool:
    return db.session.scalar(sa.select(sa.func.count(ApprovalRequest.id)).where(
        ApprovalRequest.agent_run_id == run.id, ApprovalRequest.status == "pending")) > 0


def _failed_dispatch(run: AgentRun) -> tuple[str, str, str | None] | None:
    """(reason, message, block note) when the run waited on a dispatch that failed."""
    park = run.waiting_for or {}
    if "pods" not in park:
        return None
    dispatch = db.session.get(AgentRun, uuid.UUID(park["pods"]))
    if dispatch is None or dispatch.status != "failed":
        return None
    reason = dispatch.failure_reason or "provider_error"
    evidence = dispatch.last_error or ""
    failed = db.session.scalar(sa.select(RunEvent.metadata_).where(
        RunEvent.run_id == dispatch.id, RunEvent.event_type == "failed").order_by(RunEvent.seq.desc()).limit(1))
    block_note = (failed or {}).get("block_note")  # e.g. the exact partial-dispatch note
    return reason, f"Dispatch {dispatch.short_id} failed: {evidence}"[:4000], block_note


def _finish_failed(run: AgentRun, reason: str, message: str, block_note: str | None = None) -> Outcome:
    cancelled = _cancelled_meanwhile(run)
    if cancelled is not None:
        return cancelled
    outcome = recovery.fail(run, reason, message, block_note=block_note)
    parent_id = run.parent_run_id
    db.session.commit()
    lifecycle.run_side_effects(outcome.effects)
    if parent_id is not None:
        wake_parent_if_ready(parent_id)
    _start_queued_planning(run)  # on a recovery planner, if one started, else as a new run
    return Outcome("failed", f"{reason}: {message}")


# --- waking ----------------------------------------------------------------------------------

def _resume_message(run: AgentRun, *, answered=()) -> str:
    """What happened while the run waited: each sub-agent's outcome (except those in
    `answered`, given back in their own tool results), the dispatch's, the deadline's."""
    park = run.waiting_for or {}
    lines = [child_outcome(child_id) for child_id in park.get("children", []) if child_id not in answered]
    if "pods" in park:
        dispatch = db.session.get(AgentRun, uuid.UUID(park["pods"]))
        if dispatch is None:
            lines.append("The dispatch run is gone.")
        else:
            pods = "; ".join(f"{p.name}: {p.status}, exit {p.exit_code}, {p.progress_pct or 0:g}% "
                             f"{p.progress_message or ''}" for p in pods_of(dispatch.id))
            lines.append((f"Dispatch {dispatch.short_id} ended {dispatch.status}"
                          f"{' (' + dispatch.failure_reason + ': ' + (dispatch.last_error or '') + ')' if dispatch.failure_reason else ''}. "
                          f"Pods: {pods}")[:4000])
    if "until" in park and not lines and not answered:
        return f"Woken at {utcnow().isoformat()} (the wait ended)."
    return "\n".join(lines)


def child_outcome(child_id) -> str:
    """One line a parent reads about a sub-agent it waited for: how it ended, its last words."""
    child = db.session.get(AgentRun, uuid.UUID(str(child_id)))
    if child is None:
        return f"Sub-agent run {child_id} is missing."
    final = db.session.scalar(sa.select(RunEvent.body).where(
        RunEvent.run_id == child.id, RunEvent.event_type.in_(("completed", "failed", "cancelled")))
        .order_by(RunEvent.seq.desc()).limit(1))
    return f"Sub-agent {child.agent} ({child.short_id}) ended {child.status}: {final or '(no final text)'}"


def _answer_parked_tools(run: AgentRun) -> None:
    """Tell the model what happened while it waited, in the user turn that holds its tool results.

    Each tool call that started sub-agents gets their outcomes appended to its own result
    (marked `is_error` when one of them did not complete), so a turn that started two reads
    two results; anything else (the dispatch, a deadline) follows the results as a text
    block. The parked conversation ends with that turn, which was never sent: the assistant
    turns before it are untouched and no made-up assistant turn is sent.
    """
    conversation = copy.deepcopy(run.conversation or [])
    answered: set[str] = set()
    last = conversation[-1] if conversation else None
    if last is not None and last["role"] == "user" and isinstance(last["content"], list):
        for block in last["content"]:
            awaited = block.pop("_awaits", None) if block.get("type") == "tool_result" else None
            if not awaited:
                continue
            outcomes = [child_outcome(child_id) for child_id in awaited]
            _append_to_result(block, redact("\n\n" + "\n".join(outcomes)))
            block["is_error"] = bool(block.get("is_error")) or not all(_completed(c) for c in awaited)
            answered.update(awaited)
    note = _resume_message(run, answered=answered)
    run.conversation = model_api.resumable(conversation, redact(f"Update while you waited:\n{note}") if note else None)


def _append_to_result(block: dict, text: str) -> None:
    if isinstance(block.get("content"), list):
        block["content"].append({"type": "text", "text": text.lstrip()})
    else:
        block["content"] = (block.get("content") or "") + text


def _completed(child_id) -> bool:
    child = db.session.get(AgentRun, uuid.UUID(str(child_id)))
    return child is not None and child.status == "completed"
