"""The completion audit: what a finished experiment must show before it waits for the owner's
promotion (the old system only labelled it `epm:completion-audit`). Four checks:

- pods: every pod the approved spec planned ran to exit 0 (its latest attempt), or the clean
  result names the pod, explaining its failure;
- artifacts: every artifact the plan declared was uploaded (services.dispatch.verify's table);
- numbers: every number in the TL;DR is in the evidence (services.results.result_numbers: read as a
  person writes it, matched as a person rounds). The evidence is the experiment's text, CSV
  and JSON artifacts (pods' uploads, logs, analysis files) and what its run_analysis calls
  printed. The Motivation and What-I-ran bullets may also take their numbers from the
  approved plan (they describe the design); Next steps proposes future work and is not
  audited. A survey or infra task has no pods: its evidence adds the pages its runs fetched
  and its own primary figure and design block (the table of what it read), and the plan
  may hold any bullet's number;
- figure: the primary figure is there (the lint's rule).

An agent that asks for awaiting_promotion (set_status, or a marker with next_status) meets
the audit first (`gate`): its findings are an `epm:completion-audit` marker with a verdict
and a `completion_audit` event on the asking run. A failed audit keeps the experiment in
clean_result_drafting (Sagan's turn) and tells the agent what to revise; the second failed
audit in a row hands it to the owner (blocked) with the findings. An API client that asks
gets the findings as a 409 and nothing is recorded (`guard_promotion`, the transition
table's guard on that move).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

import sqlalchemy as sa

from models import AgentRun, Artifact, Experiment, Pod, RunEvent, WorkflowEvent, db
from services.core import events
from services.core.actors import Actor
from services.core.errors import Conflict
from services.core.sanitize import local_name, parse_fragment, text_of
from services.dispatch import spec as specs
from services.dispatch import verify
from services.results.result_lint import lint, tldr_items, tldr_label
from services.results.result_numbers import Evidence, claims, text_without_code
from services.workflow import lifecycle, runs

MARKER = "epm:completion-audit"
TARGET = "awaiting_promotion"
ROUNDS = 2  # failed audits in a row before the owner decides
TEXT_TYPES = ("text/", "application/json")
ARTIFACT_READ_BYTES = 5 * 1024 * 1024      # of one artifact
EVIDENCE_READ_BYTES = 50 * 1024 * 1024     # of all of them
# Bullets whose numbers describe the design: the approved plan may hold them too.
DESIGN_BULLETS = ("Motivation", "What I ran")
UNAUDITED_BULLETS = ("Next steps",)


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    message: str
    details: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Report:
    checks: list[Check]

    @property
    def passed(self) -> bool:
        return all(check.ok for check in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [check for check in self.checks if not check.ok]

    def summary(self) -> str:
        if self.passed:
            return f"Completion audit passed ({len(self.checks)} checks): " + "; ".join(c.message for c in self.checks)
        return "Completion audit failed: " + "; ".join(c.message for c in self.failures)

    def as_json(self) -> dict:
        """The verdict and the checks, each message and list capped (a TL;DR can hold many numbers)."""
        return {"verdict": "pass" if self.passed else "fail",
                "checks": [{**asdict(c), "message": c.message[:2000],
                            "details": {k: v[:50] if isinstance(v, list) else v for k, v in c.details.items()}}
                           for c in self.checks]}


class AuditFailed(Conflict):
    """The move to awaiting_promotion is refused until the completion audit passes."""

    code = "completion_audit_failed"


def audit(experiment: Experiment) -> Report:
    """Every check against the experiment as it stands (reads only)."""
    body = experiment.body or ""
    return Report([_pods_check(experiment, body), _artifacts_check(experiment), _numbers_check(experiment, body),
                   _figure_check(experiment, body)])


# --- pods ---------------------------------------------------------------------------------

def _pods_check(experiment: Experiment, body: str) -> Check:
    planned = [] if experiment.pod_free else [p for p in specs.as_pods(experiment.pod_spec) or [] if isinstance(p, dict)]
    if not planned:
        return Check("pods", True, "no pods were planned")
    latest: dict[int, Pod] = {}
    for pod in db.session.scalars(sa.select(Pod).where(Pod.experiment_id == experiment.id).order_by(Pod.created_at)):
        latest[pod.run_index] = pod  # the latest attempt of each planned pod counts
    written = text_of(parse_fragment(body)).lower()
    unexplained, explained = [], []
    for index, spec in enumerate(planned):
        pod = latest.get(index)
        if pod is not None and pod.exit_code == 0:
            continue
        name = spec.get("name") or f"pod {index}"
        what = "never ran" if pod is None else (f"exited {pod.exit_code}" if pod.exit_code is not None
                                                else f"ended {pod.status} without an exit code")
        names = {n.lower() for n in (spec.get("name"), pod.name if pod else None) if n}
        (explained if any(n in written for n in names) else unexplained).append(f"{name} {what}")
    if unexplained:
        return Check("pods", False, "planned pod(s) did not run to exit 0 and the result does not explain them: "
                     + ", ".join(unexplained) + " (name each pod in the result and say what happened)",
                     {"unexplained": unexplained, "explained": explained})
    message = f"all {len(planned)} planned pod(s) ran to exit 0"
    if explained:
        message = f"{len(planned) - len(explained)} of {len(planned)} planned pod(s) ran to exit 0; the result " \
                  f"explains the others ({', '.join(explained)})"
    return Check("pods", True, message, {"explained": explained})


# --- artifacts ------------------------------------------------------------------------------

def _artifacts_check(experiment: Experiment) -> Check:
    table = verify.verification_table(experiment)
    promised = len(table["rows"]) - len(table["links"])
    if table["missing"]:
        return Check("artifacts", False, "artifact(s) the plan promised were not uploaded: " + ", ".join(table["missing"]),
                     {"missing": table["missing"]})
    if not promised:
        return Check("artifacts", True, "the plan promised no uploaded artifact")
    return Check("artifacts", True, f"all {promised} artifact(s) the plan promised exist")


# --- numbers ----------------------------------------------------------------------------------

def _numbers_check(experiment: Experiment, body: str) -> Check:
    items = tldr_items(body)
    if not items:
        return Check("numbers", False, "the clean result has no TL;DR to audit")
    wanted: list[tuple[str, object]] = []
    for item in items:
        label = tldr_label(item)
        if label in UNAUDITED_BULLETS:
            continue
        wanted += [(label or "TL;DR", claim) for claim in claims(text_without_code(item))]
    if not wanted:
        return Check("numbers", True, "the TL;DR states no number")
    data = evidence(experiment)
    design = Evidence()
    design.add((experiment.plan_md or "") + "\n" + json.dumps(experiment.pod_spec or []))
    if experiment.pod_free:
        # A survey's or infra task's write-up is its own data: the table of what it read (its
        # primary figure) and its design block; the plan may hold any bullet's number.
        data.add(_own_data(body))
    design_bullets = None if experiment.pod_free else DESIGN_BULLETS
    missing = [f"{claim.text} ({label})" for label, claim in wanted if not data.holds(claim)
               and not ((design_bullets is None or label in design_bullets) and design.holds(claim))]
    if missing:
        return Check("numbers", False, "TL;DR number(s) in no artifact or analysis output: " + ", ".join(missing),
                     {"missing": missing, "evidence_numbers": len(data)})
    return Check("numbers", True, f"all {len(wanted)} TL;DR number(s) are in the artifacts or analysis outputs")


def _own_data(body: str) -> str:
    """The text of a write-up's primary figure and design block."""
    root = parse_fragment(body)
    parts = [text_of(e) for e in root.iter() if isinstance(e.tag, str)
             and ((local_name(e.tag) == "figure" and e.get("id") == "figure") or local_name(e.tag) == "details")]
    return "\n".join(parts)


def evidence(experiment: Experiment) -> Evidence:
    """The numbers an experiment's result may quote: its text artifacts, what its analyses
    printed, and (pod-free kinds) the pages its runs fetched."""
    found = Evidence()
    budget = EVIDENCE_READ_BYTES
    rows = db.session.execute(sa.select(Artifact.content_type, sa.func.substr(Artifact.content, 1, ARTIFACT_READ_BYTES))
                              .where(Artifact.experiment_id == experiment.id).order_by(Artifact.created_at))
    for content_type, content in rows:
        if budget <= 0 or not content_type.startswith(TEXT_TYPES):
            continue
        chunk = bytes(content or b"")[:budget]
        budget -= len(chunk)
        found.add(chunk.decode("utf-8", errors="replace"))
    run_ids = sa.select(AgentRun.id).where(AgentRun.scope_kind == "experiment", AgentRun.scope_id == experiment.id)
    for body, metadata in db.session.execute(sa.select(RunEvent.body, RunEvent.metadata_).where(
            RunEvent.run_id.in_(run_ids), RunEvent.event_type == "tool_result")):
        if (metadata or {}).get("tool") == "run_analysis" and not (metadata or {}).get("is_error"):
            found.add(body or "")
    if experiment.pod_free:
        for conversation in db.session.scalars(sa.select(AgentRun.conversation).where(AgentRun.id.in_(run_ids))):
            for page in fetched_pages(conversation or []):
                found.add(page)
    return found


def fetched_pages(conversation: list) -> list[str]:
    """The text of every page a run fetched with web_fetch (the document inside each result)."""
    pages = []
    for message in conversation:
        if message.get("role") != "assistant" or not isinstance(message.get("content"), list):
            continue
        for block in message["content"]:
            result = block.get("content") if block.get("type") == "web_fetch_tool_result" else None
            document = (result or {}).get("content") if isinstance(result, dict) else None
            source = (document or {}).get("source") if isinstance(document, dict) else None
            if isinstance(source, dict) and isinstance(source.get("data"), str):
                pages.append(source["data"])
    return pages


# --- the figure ---------------------------------------------------------------------------------

def _figure_check(experiment: Experiment, body: str) -> Check:
    rule = next(f for f in lint(experiment.title, body).findings if f.rule == "primary-figure")
    return Check("figure", rule.ok, "the primary figure is there" if rule.ok else rule.message)


# --- the gate ----------------------------------------------------------------------------------

@dataclass
class Gate:
    """What asking for awaiting_promotion met: whether the audit passed, what the agent is
    told, the effects to run after commit (a hand-over to the owner)."""
    passed: bool
    message: str
    effects: list = field(default_factory=list)


def asks_for_promotion(experiment: Experiment, to: str | None, actor: Actor) -> bool:
    """Is this a move to awaiting_promotion the actor may make (so the audit decides it)?"""
    return to == TARGET and lifecycle.rule_for_move(experiment, TARGET, actor.transition_role) is not None


def gate(experiment: Experiment, actor: Actor, *, run_id=None) -> Gate:
    """Audit before the move; record the verdict (marker, and the asking run's event). On a
    failure the experiment stays in Sagan's turn with what to revise, or — the ROUNDS-th
    failure in a row — goes to the owner, blocked with the findings. The caller commits."""
    report = audit(experiment)
    failures = _failures_in_a_row(experiment) + (0 if report.passed else 1)
    metadata = {**report.as_json(), "round": failures or None, "run_id": str(run_id) if run_id else None}
    events.record(experiment, "marker", actor, note=report.summary()[:1900], metadata=metadata, marker=MARKER)
    if run_id is not None:
        runs.append_event(run_id, "completion_audit", report.summary(), metadata)
    if report.passed:
        return Gate(True, report.summary())
    findings = " ".join(f"({i}) {c.message}." for i, c in enumerate(report.failures, start=1))
    if failures >= ROUNDS:
        note = (f"The completion audit failed {failures} times in a row, so the owner decides: {findings}")[:1900]
        effects = lifecycle.transition(experiment, "blocked", Actor.system("completion audit"), note=note,
                                       metadata={"reason": "completion_audit", "checks": metadata["checks"]})
        return Gate(False, f"The completion audit failed again: {findings} The experiment is handed to the owner "
                           "(blocked with these findings); stop here.", effects)
    return Gate(False, f"The completion audit failed (round {failures} of {ROUNDS}); the experiment stays in "
                       f"{experiment.status}: {findings} Revise (have the analyzer fix the clean result: every TL;DR "
                       "number must come from an artifact or an analysis output; name each failed pod and say "
                       "what happened), then ask for awaiting_promotion again.")


def guard_promotion(experiment: Experiment, to: str, actor: Actor, metadata: dict) -> None:
    """The transition table's guard on clean_result_drafting → awaiting_promotion, for a client
    outside Sagan (an API token acting as an agent): a failed audit is a 409 with the findings
    and nothing changes; a pass is recorded with the move. Sagan's own agents met `gate` in
    their tool call already, where a failure is recorded and answered (not raised)."""
    if actor.kind != "token":
        return
    report = audit(experiment)
    if not report.passed:
        raise AuditFailed(report.summary(), checks=report.as_json()["checks"])
    events.record(experiment, "marker", actor, note=report.summary()[:1900], metadata=report.as_json(), marker=MARKER)


def _failures_in_a_row(experiment: Experiment) -> int:
    """Failed audits since the last passed one or since the experiment last came (back) to
    clean_result_drafting, whichever is later."""
    rows = db.session.execute(sa.select(WorkflowEvent.marker, WorkflowEvent.metadata_, WorkflowEvent.to_status)
                              .where(WorkflowEvent.entity_id == experiment.id,
                                     sa.or_(WorkflowEvent.marker == MARKER, WorkflowEvent.event_type == "state_changed"))
                              .order_by(WorkflowEvent.created_at.desc()))
    count = 0
    for marker, metadata, to_status in rows:
        if marker == MARKER:
            if (metadata or {}).get("verdict") == "pass":
                break
            count += 1
        elif to_status == "clean_result_drafting":
            break
    return count

