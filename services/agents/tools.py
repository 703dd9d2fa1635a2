"""The workflow tools an agent may call: reading the experiment, moving it, plans, results,
comments, follow-ups, pods and sub-agents. Each is validated and is an audited call into the
same service layer the UI uses (never SQL). Every tool acts on the run's own experiment only:
no tool takes an experiment argument, so an agent cannot touch another experiment, and
none can approve a plan, raise a cap or change an approved spec (SPEC §5.5).

The other tools live beside their domain (code_tools, repo_tools, research_tools, analysis,
implementation's `code_step`); services.agents.toolbox collects them all by name.
"""
from __future__ import annotations

import json
import re

import sqlalchemy as sa

from models import AgentRun, Experiment, Pod, WorkflowEvent, db
from services.agents import web_tools
from services.agents.research_tools import embed_artifacts
from services.agents.toolkit import ToolContext, ToolResult, tool
from services.claude import loader
from services.core import events, registry
from services.core.errors import SaganError, ValidationError
from services.dispatch import pod_logs, provisioner
from services.dispatch.provisioner import live_dispatch, stop_pod
from services.planning import approvals, discussion, follow_ups, questions
from services.results import completion_audit, result_lint, results
from services.workflow import lifecycle, markers, runs


def _json(data) -> str:
    return json.dumps(data, indent=1, default=str)


# --- reading ----------------------------------------------------------------------------

CLEAN_RESULT_SHOWN = 40_000  # characters of the clean result's HTML a model reads
_DATA_URL = re.compile(r"data:([\w.+-]+/[\w.+-]+);base64,([A-Za-z0-9+/=]+)")


@tool("get_experiment", "The experiment this run works on: record, status and turn, and its clean result "
                        "(HTML, with its lint report) once one is written.")
def get_experiment(ctx: ToolContext, data: dict) -> ToolResult:
    e = ctx.need_experiment()
    record = {
        "number": e.number, "title": e.title, "status": e.status, "turn": e.turn, "kind": e.kind,
        "priority": e.priority, "tags": e.tags, "hypothesis": e.hypothesis, "gitBranch": e.git_branch,
        "gitCommit": e.git_commit, "podAccount": e.pod_account, "hasPlan": bool(e.plan_md),
        "hasCleanResult": e.has_clean_result, "parentExperimentId": str(e.parent_experiment_id or "") or None,
    }
    if e.has_clean_result and e.body:
        # The clean-result critic reads the write-up here (read_experiment is for other
        # experiments). Embedded figures are data URLs of up to megabytes of base64, which a
        # model cannot read as text: each is shown as its type and size (read_artifact shows it).
        html = _DATA_URL.sub(lambda m: f"data:{m[1]};base64,[{len(m[2]) * 3 // 4:,} bytes; see read_artifact]",
                             e.body)
        record["cleanResultHtml"] = html[:CLEAN_RESULT_SHOWN]
        record["cleanResultTruncated"] = len(html) > CLEAN_RESULT_SHOWN
        record["cleanResultLint"] = result_lint.lint(e.title, e.body).summary()
    return ToolResult(_json(record))  # api_content redacts what the model is sent


@tool("list_events", "The experiment's workflow events, newest first; filter by type or marker.",
      {"event_type": {"type": "string", "enum": registry.WORKFLOW_EVENT_TYPES},
       "marker": {"type": "string"}, "limit": {"type": "integer"}})
def list_events(ctx: ToolContext, data: dict) -> ToolResult:
    if data.get("marker"):
        markers.check_marker(data["marker"])
    page = events.timeline(ctx.need_experiment(), limit=max(1, min(int(data.get("limit") or 50), 200)),
                           event_type=data.get("event_type"), marker=data.get("marker"))
    return ToolResult(_json([events.event_json(e) for e in page.events]))


def _answers(experiment: Experiment, marker: str) -> dict:
    rows = db.session.scalars(sa.select(WorkflowEvent).where(
        WorkflowEvent.entity_id == experiment.id, WorkflowEvent.marker == marker)
        .order_by(WorkflowEvent.created_at))
    merged: dict = {}
    for row in rows:
        merged.update((row.metadata_ or {}).get("answers") or {})
    return merged


@tool("get_plan", "The current plan (markdown), the approved pod spec, and the owner's answers.")
def get_plan(ctx: ToolContext, data: dict) -> ToolResult:
    e = ctx.need_experiment()
    return ToolResult(_json({"plan_markdown": e.plan_md, "approved_pod_spec": e.pod_spec,
                             "clarify_answers": _answers(e, "epm:clarify-answers"),
                             "textbox_answers": _answers(e, "epm:textbox-answers")}))


# --- workflow -----------------------------------------------------------------------------

@tool("set_status", "Move the experiment to a status the workflow allows agents to set; a note says why.",
      {"status": {"type": "string", "enum": registry.STATUS_NAMES},
       "note": {"type": "string", "maxLength": 1900}}, ["status"])
def set_status(ctx: ToolContext, data: dict) -> ToolResult:
    experiment = ctx.need_experiment()
    refused = _completion_audit(ctx, data["status"])
    if refused is not None:
        return refused
    effects = lifecycle.transition(experiment, data["status"], ctx.actor, note=data.get("note"),
                                   metadata={"run_id": str(ctx.run.id)})
    return ToolResult(f"#{experiment.number} is now {experiment.status}.", effects=effects)


def _completion_audit(ctx: ToolContext, to: str | None) -> ToolResult | None:
    """A move to awaiting_promotion meets the completion audit first; its error result when it
    failed (returned, not raised, so the audit's verdict is kept), else None."""
    experiment = ctx.need_experiment()
    if not completion_audit.asks_for_promotion(experiment, to, ctx.actor):
        return None
    gate = completion_audit.gate(experiment, ctx.actor, run_id=ctx.run.id)
    return None if gate.passed else ToolResult(gate.message, is_error=True, effects=gate.effects)


@tool("post_marker", "Record a workflow marker (progress, review verdicts); optional next_status.",
      {"marker": {"type": "string", "enum": registry.MARKERS}, "note": {"type": "string", "maxLength": 1900},
       "metadata": {"type": "object"}, "review_pair": {"type": "string", "enum": registry.REVIEW_PAIRS},
       "round": {"type": "integer"}, "reviewer": {"type": "string"},
       "verdict": {"type": "string", "enum": registry.REVIEW_VERDICTS}, "required_fix": {"type": "string"},
       "reconciler_decision": {"type": "string"},
       "next_status": {"type": "string", "enum": registry.STATUS_NAMES}}, ["marker"])
def post_marker(ctx: ToolContext, data: dict) -> ToolResult:
    markers.check_marker(data["marker"])
    refused = _completion_audit(ctx, data.get("next_status"))
    if refused is not None:
        return refused
    review = {k: data[k] for k in markers.REVIEW_FIELDS if k in data}
    event, effects = markers.post_marker(ctx.need_experiment(), data["marker"], ctx.actor,
                                         note=data.get("note"), metadata=data.get("metadata"),
                                         review=review, next_status=data.get("next_status"))
    return ToolResult(f"{data['marker']} recorded.", effects=effects)


@tool("ask_questions", "Ask the owner clarifying questions; the run ends and the answers start a new one.",
      {"questions": {"type": "array"}}, ["questions"])
def ask_questions(ctx: ToolContext, data: dict) -> ToolResult:
    effects = questions.ask(ctx.need_experiment(), data["questions"], ctx.actor)
    return ToolResult("Questions sent to the owner; their answers start a new planning run.",
                      effects=effects, finish=True)


@tool("submit_plan", "Submit plan markdown (11 sections, checklist, optional runpod-spec block).",
      {"markdown": {"type": "string", "maxLength": 200_000}}, ["markdown"], own_transaction=True)
def submit_plan(ctx: ToolContext, data: dict) -> ToolResult:
    experiment = ctx.need_experiment()
    # The pages the model cited while researching stay with the plan, as a Sources list.
    markdown = web_tools.with_markdown_sources(data["markdown"], web_tools.sources(ctx.run.conversation))
    prepared = approvals.prepare_plan(experiment, _rendering_unlocked(markdown))
    with db.session.begin_nested():  # a refused plan leaves nothing half-written
        submission = approvals.submit_plan(experiment, prepared, ctx.actor, source="agent",
                                           agent_run_id=ctx.run.id)
    ctx.run.plan_md = submission.plan_version.markdown
    ctx.run.plan_json = submission.plan_version.plan_json
    if not submission.valid:
        return ToolResult("The plan was stored as v%d but its runpod-spec is invalid; fix these and submit "
                          "again:\n- %s" % (submission.plan_version.version, "\n- ".join(submission.problems)),
                          is_error=True)
    state = "auto-approved" if submission.auto_approved else "waiting for the owner's approval"
    problems = ("\nOther notes: " + "; ".join(submission.problems)) if submission.problems else ""
    return ToolResult(f"Plan v{submission.plan_version.version} accepted; {state}. "
                      f"Estimate: {json.dumps((submission.estimate or {}).get('total_usd'))} USD.{problems}",
                      effects=submission.effects)


# --- results, comments, follow-ups ----------------------------------------------------------

@tool("write_clean_result", "Write the experiment's clean result (self-contained HTML); optional title. Embed a "
                            "figure artifact with <img src=\"artifact:NAME\">.",
      {"html": {"type": "string", "maxLength": 200_000}, "title": {"type": "string", "maxLength": 300}},
      ["html"], own_transaction=True)
def write_clean_result(ctx: ToolContext, data: dict) -> ToolResult:
    experiment = ctx.need_experiment()
    body = web_tools.with_html_sources(data["html"], web_tools.sources(ctx.run.conversation))
    body = _rendering_unlocked(embed_artifacts(experiment, body))
    prepared = results.prepare_result(experiment, body, data.get("title"))
    with db.session.begin_nested():  # a refused result leaves nothing half-written
        saved = results.save_clean_result(experiment, prepared, ctx.actor)
    lint = saved.report.summary()
    if not saved.changed:
        return ToolResult(f"Nothing changed (still version {saved.version}). {lint}")
    return ToolResult(f"Clean result saved (version {saved.version}). {lint}")


@tool("add_comment", "Post a comment (markdown) in the discussion you were asked in, labelled as Claude.",
      {"body": {"type": "string", "maxLength": 20_000}}, ["body"], own_transaction=True)
def add_comment(ctx: ToolContext, data: dict) -> ToolResult:
    body = discussion.clean_body(data["body"])
    if looks_like_leaked_instructions(body, _prompt_of(ctx.run.agent)):
        raise ValidationError("That text reads like instructions rather than a comment; write only the answer.")
    prepared = discussion.prepare_body(_rendering_unlocked(body))
    with db.session.begin_nested():  # a refused reply leaves nothing half-written
        discussion.post_agent_reply(ctx.run, prepared, ctx.experiment)
    return ToolResult("Comment posted.")


_LEAK_PHRASES = ("return only the comment text", "write only the answer itself", "you are sagan's",
                 "system prompt", "as an ai language model", "my instructions say", "</instructions>")


def _prompt_of(agent: str) -> str:
    try:
        return loader.get(agent).prompt
    except SaganError:
        return ""


def looks_like_leaked_instructions(text: str, prompt: str = "") -> bool:
    """Known leak phrases, or a sentence of the agent's own prompt repeated verbatim."""
    lowered = " ".join(text.lower().split())
    if any(phrase in lowered for phrase in _LEAK_PHRASES):
        return True
    sentences = re.split(r"(?<=[.!?:])\s+", " ".join(prompt.lower().split()))
    return any(len(sentence) >= 40 and sentence in lowered for sentence in sentences)


@tool("propose_follow_ups", "Create up to three follow-up experiments from this result.",
      {"experiments": {"type": "array"}}, ["experiments"])
def propose_follow_ups(ctx: ToolContext, data: dict) -> ToolResult:
    parent = ctx.need_experiment()
    made = follow_ups.propose(parent, data["experiments"], ctx.actor)
    return ToolResult("Created follow-ups (proposed by Claude): " + ", ".join(f"#{c.number}" for c in made))


# --- pods -----------------------------------------------------------------------------------------

@tool("launch_pods", "Dispatch the experiment's approved pod spec (one live dispatch per experiment).")
def launch_pods(ctx: ToolContext, data: dict) -> ToolResult:
    run, effects = provisioner.launch(ctx.need_experiment(), ctx.actor, parent_run_id=ctx.run.id)
    if run is None:
        return ToolResult("Dispatch is gated (fleet incident or spend cap); the experiment waits in "
                          "gate_pending for the owner. Stop here.", effects=effects)
    return ToolResult(f"Dispatch {run.short_id} queued. Call wait_for_pods to wait for the pods.", effects=effects)


@tool("list_pods", "The experiment's pods with status, progress and cost.")
def list_pods(ctx: ToolContext, data: dict) -> ToolResult:
    pods = db.session.scalars(sa.select(Pod).where(Pod.experiment_id == ctx.need_experiment().id)
                              .order_by(Pod.created_at))
    return ToolResult(_json([{"name": p.name, "status": p.status, "account": p.account, "gpu": p.gpu_type_id,
                              "progress": p.progress_pct, "message": p.progress_message, "exitCode": p.exit_code,
                              "costPerHr": p.cost_per_hr, "uptimeSeconds": p.uptime_seconds} for p in pods]))


@tool("read_pod_logs", "A pod's output (stdout and stderr), redacted: the last `tail` lines (default 200, max "
                       "5000), or on RunPod the lines after `since` (an RFC 3339 time from an earlier read). "
                       "On RunPod each line is labelled [container] or [system]: the host's own lines (image "
                       "pull, disk, GPU errors) are all a pod that never started its container has. "
                       "Reads the provider while the pod exists, else the log the pod uploaded.",
      {"pod": {"type": "string", "maxLength": 200, "description": "the pod's name, as list_pods shows it"},
       "tail": {"type": "integer"}, "since": {"type": "string", "maxLength": 64}}, ["pod"], own_transaction=True)
def read_pod_logs(ctx: ToolContext, data: dict) -> ToolResult:
    if "tail" in data and data.get("since"):
        raise ValidationError("Give tail or since, not both.", field="since")
    pod_logs.parse_tail(data.get("tail"))
    pod_logs.parse_since(data.get("since"))
    pod = pod_logs.pod_of_experiment(ctx.need_experiment().id, data["pod"])
    db.session.commit()  # no transaction is held while the provider streams
    return ToolResult(pod_logs.read_pod_logs(pod, tail=data.get("tail"), since=data.get("since")).render())


@tool("stop_pods", "Stop the experiment's running pods (volumes are kept).")
def stop_pods(ctx: ToolContext, data: dict) -> ToolResult:
    live = list(db.session.scalars(sa.select(Pod).where(
        Pod.experiment_id == ctx.need_experiment().id, Pod.status.in_(registry.POD_LIVE_STATUSES))))
    for pod in live:
        stop_pod(pod, "failure", actor=ctx.actor)
    if not live:
        return ToolResult("No pods are running.")
    stopping = sum(1 for pod in live if pod.status != "stopped")
    # A pod on this host is stopped by its local worker, a refused stop is asked again: not yet stopped.
    return ToolResult(f"Stopped {len(live) - stopping} pod(s); volumes kept."
                      + (f" {stopping} still stopping (asked again until it holds)." if stopping else ""))


@tool("wait_for_pods", "Park this run until the experiment's live dispatch ends (pods finished or failed).")
def wait_for_pods(ctx: ToolContext, data: dict) -> ToolResult:
    dispatch = live_dispatch(ctx.need_experiment().id)
    if dispatch is None:
        return ToolResult("No dispatch is live for this experiment; nothing to wait for.", is_error=True)
    return ToolResult(f"Waiting for dispatch {dispatch.short_id}.", park={"pods": str(dispatch.id)})


# --- sub-agents ---------------------------------------------------------------------------

@tool("spawn_agent", "Start a sub-agent on this experiment and wait for it to finish.",
      {"agent": {"type": "string"}, "request": {"type": "string", "maxLength": 20_000}}, ["agent", "request"])
def spawn_agent(ctx: ToolContext, data: dict) -> ToolResult:
    definition = loader.get(data["agent"])
    if definition.name == ctx.run.agent:
        raise ValidationError("An agent cannot spawn itself.")
    depth, parent = 0, ctx.run
    while parent.parent_run_id is not None and depth < 5:
        parent = db.session.get(AgentRun, parent.parent_run_id)
        depth += 1
    if depth >= 2:
        raise ValidationError("Sub-agents cannot spawn further sub-agents.")
    child = runs.create_run(kind=ctx.run.kind, agent=definition.name, request=data["request"],
                            scope_id=ctx.run.scope_id, scope_kind=ctx.run.scope_kind,
                            parent_run_id=ctx.run.id, model=loader.model_for(definition))
    return ToolResult(f"Started {definition.name} as run {child.short_id}; waiting for it to finish.",
                      park={"children": [str(child.id)]}, enqueue=[child.id])


def _rendering_unlocked(text: str) -> str:
    """`text`, once the turn's earlier writes (the previous tool's result event) are
    committed: the render that follows runs with no transaction open, so SQLite's write
    lock is not held while the text renders (services.core.unlocked). These tools run without
    the toolbox's savepoint, and open their own after the render."""
    db.session.commit()
    return text
