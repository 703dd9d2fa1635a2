"""The code loop of an approved experiment (SPEC §2.2, §3, §5.7):

    approved → implementing → code_reviewing (⇄ implementing, ≤ 3 rounds) → testing → dispatch

The orchestrator drives it with one tool, `code_step`, called again each time it is woken.
The tool reads where the experiment stands from the database — its status, the code round
stamped on the loop's own status changes (`code_round`), and the markers the sub-agents
posted since — and does the next thing: starts the implementer, the reviewer pair, the
reconciler or the test step as child runs and parks the orchestrator on them, or moves
the status on. Because the state is read, never remembered, an orchestrator that starts
mid-way (a recovery, a restart) continues where the last one stopped instead of redoing
work: a finished review is not asked for again, a running sub-agent is waited for rather
than started twice.

Rules (SPEC §3): both reviewers pass → the tests; a reviewer asks for a targeted fix in
round 1 or 2 → the implementer's next round; a reviewer asks for the owner or says the
work is not worth continuing, or round 3 ends without two passes → the reconciler decides.
After round 3 disagreement alone cannot block: the reconciler's minimal fix is applied and
the code goes to the tests without another review. The test step (no model: Sagan runs
the repository's test and lint commands in the sandbox) posts `epm:test-verdict`, pushes
the tested commit, and on a pass the loop splices the branch and commit into the pod spec
and hands dispatch to the pod-provisioner.

Sub-agents with code tools, and the test step, run on the `local` queue: the host with
the worktrees (`jobs.job_for`).
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import sqlalchemy as sa
from flask import current_app

from models import AgentRun, Experiment, WorkflowEvent, db
from services.agents import code_tools
from services.agents.code_state import CodeState, current_round, cycle_of, latest_commit, read_state, review_of
from services.agents.code_tools import require_tool
from services.agents.toolkit import ToolContext, ToolResult, tool
from services.claude import loader
from services.code import sandbox, workspaces
from services.core import events, registry, settings
from services.core.actors import Actor
from services.core.errors import SaganError, ValidationError
from services.dispatch import pod_logs, recovery
from services.workflow import jobs, lifecycle, markers, runs
from services.workflow.parking import Heartbeat, wake_parent_if_ready

IMPLEMENTER = "experiment-implementer"
REVIEWERS = {"code-reviewer": "epm:code-review", "code-plan-reviewer": "epm:code-review-codex"}
RECONCILER = "reconciler"
TEST_STEP = jobs.TEST_STEP
PROVISIONER = "pod-provisioner"
IMPLEMENTATION_MARKER = "epm:experiment-implementation"
RECONCILE_MARKER = "epm:code-review-reconcile"
TEST_MARKER = "epm:test-verdict"
MAX_ROUNDS = registry.REVIEW_MAX_ROUNDS
ATTEMPTS = 2  # a sub-agent that ends twice without its marker blocks the experiment
ACTIVE = registry.RUN_ACTIVE_STATUSES
SERIOUS = ("blocked_needs_user_decision", "fail_not_worth_continuing")
CODE_STATUSES = ("approved", "implementing", "code_reviewing", "testing")


# --- sub-agent runs ------------------------------------------------------------------------------

def _runs_of(experiment: Experiment, agent: str, *, since=None, active: bool | None = None) -> list[AgentRun]:
    query = sa.select(AgentRun).where(AgentRun.scope_kind == "experiment", AgentRun.scope_id == experiment.id,
                                      AgentRun.agent == agent)
    if since is not None:
        query = query.where(AgentRun.created_at >= since)
    if active is True:
        query = query.where(AgentRun.status.in_(ACTIVE))
    elif active is False:
        query = query.where(AgentRun.status.not_in(ACTIVE))
    return list(db.session.scalars(query.order_by(AgentRun.created_at)))


@dataclass
class Step:
    """What one `code_step` call did: notes for the model, runs to wait for, effects."""

    ctx: ToolContext
    notes: list[str] = field(default_factory=list)
    waiting_on: list[AgentRun] = field(default_factory=list)
    enqueue: list = field(default_factory=list)
    effects: list = field(default_factory=list)

    def move(self, to: str, note: str, **metadata) -> None:
        experiment = self.ctx.need_experiment()
        self.effects += lifecycle.transition(experiment, to, self.ctx.actor, note=note,
                                             metadata={"run_id": str(self.ctx.run.id), **metadata})
        self.notes.append(note)

    def start(self, agent: str, request: str, *, provider: str | None = None) -> AgentRun:
        """A child run of the orchestrator, or the one already working on the same thing."""
        experiment = self.ctx.need_experiment()
        live = _runs_of(experiment, agent, active=True)
        if live:
            self.waiting_on += live
            self.notes.append(f"{agent} is already working (run {live[0].short_id}); waiting for it.")
            return live[0]
        model = None if provider else loader.model_for(loader.get(agent))
        child = runs.create_run(kind=self.ctx.run.kind, agent=agent, request=request, scope_id=experiment.id,
                                parent_run_id=self.ctx.run.id, model=model, pod_account=experiment.pod_account)
        if provider:
            child.provider = provider
        self.waiting_on.append(child)
        self.enqueue.append(child.id)
        self.notes.append(f"Started {agent} as run {child.short_id}.")
        return child

    def block(self, note: str) -> None:
        self.move("blocked", note[:1900])

    def result(self) -> ToolResult:
        text = "\n".join(self.notes) or "Nothing to do."
        if self.waiting_on:
            text += "\nYou are parked until they finish; call code_step again when you are woken."
            return ToolResult(text, park={"children": [str(r.id) for r in self.waiting_on]},
                              enqueue=self.enqueue, effects=self.effects)
        return ToolResult(text, effects=self.effects)


def _attempts_exhausted(step: Step, state: CodeState, agent: str, marker: str) -> bool:
    """Block when `agent` ended ATTEMPTS times in this phase without posting its marker."""
    since = state.phase_start.created_at if state.phase_start else None
    ended = _runs_of(state.experiment, agent, since=since, active=False)
    if len(ended) < ATTEMPTS:
        return False
    step.block(f"{agent} ended {len(ended)} times in code round {state.round} without posting {marker} "
               f"(runs {', '.join(r.short_id for r in ended)}); read their transcripts, then unblock.")
    return True


# --- requests for the sub-agents ------------------------------------------------------------------

def _findings(state: CodeState, experiment: Experiment) -> str:
    """What the previous round asked for: reviewers' fixes, the reconciler's decision, or failing tests."""
    previous = state.round - 1 if not state.reconciled else state.round
    cycle = cycle_of(experiment)
    return "\n".join(filter(None, [findings_of_round(cycle, previous), *_crash_findings(cycle, state.round)]))


def findings_of_round(cycle: list[WorkflowEvent], code_round: int) -> str:
    """The fixes asked for in `code_round`, one line each, from the cycle's events (oldest
    first; the latest of each kind counts): each reviewer that did not pass, the reconciler's
    decision, the tests' failure with its output."""
    lines = [line for agent, marker in REVIEWERS.items()
             if (line := _reviewer_finding(agent, _latest_review(cycle, marker, code_round)))]
    reconcile = [e for e in cycle if e.marker == RECONCILE_MARKER and _review_round(e) == code_round]
    if reconcile:
        lines.append(f"- reconciler decided: {review_of(reconcile[-1]).get('reconciler_decision') or reconcile[-1].note}")
    failed = _failed_tests(cycle, code_round)
    if failed is not None:
        lines.append(f"- the tests failed on {str(failed.get('commit'))[:12]}:\n```\n{failed.get('output_tail', '')}\n```")
    return "\n".join(lines)


def _review_round(event: WorkflowEvent) -> int:
    return int(review_of(event).get("round") or 0)


def _latest_review(cycle: list[WorkflowEvent], marker: str, code_round: int) -> WorkflowEvent | None:
    """The last code-review-pair event with `marker` for `code_round`."""
    found = [e for e in cycle if e.marker == marker and _review_round(e) == code_round
             and review_of(e).get("review_pair") == "code_review"]
    return found[-1] if found else None


def _reviewer_finding(agent: str, event: WorkflowEvent | None) -> str | None:
    """A reviewer's line: its verdict and the fix it asks for, unless it passed (or never spoke)."""
    if event is None or review_of(event).get("verdict") == "pass":
        return None
    review = review_of(event)
    return f"- {agent} ({review.get('verdict')}): {review.get('required_fix') or event.note or ''}"


def _failed_tests(cycle: list[WorkflowEvent], code_round: int) -> dict | None:
    """The metadata of the round's last test verdict that did not pass, if any did not."""
    failed = [e.metadata_ or {} for e in cycle if e.marker == TEST_MARKER
              and (e.metadata_ or {}).get("round") == code_round and (e.metadata_ or {}).get("verdict") != "pass"]
    return failed[-1] if failed else None


def _implementer_request(state: CodeState, experiment: Experiment) -> str:
    test = settings.get("research_repo_test_command") or "(none configured)"
    head = (f"Code round {state.round} of #{experiment.number}. Your worktree is branch experiment-"
            f"{experiment.number} of the research repository. The repository's test command: `{test}`.")
    if state.reconciled:
        task = ("After round 3 the reconciler picked one minimal fix; apply exactly that, nothing else:\n"
                + _findings(state, experiment))
    elif state.round == 1:
        task = "Implement the approved plan (get_plan): the code and tests the plan's runs need."
    elif _crash_findings(cycle_of(experiment), state.round):
        task = ("The tested code crashed on a pod. Fix the cause of this crash, and only that; add a test that "
                f"reproduces it:\n{_findings(state, experiment)}")
    else:
        task = f"Fix what round {state.round - 1} found, and only that:\n{_findings(state, experiment)}"
    return (f"{head}\n\n{task}\n\nRun the tests with run_command, commit with git_commit, push with git_push, "
            f"then post {IMPLEMENTATION_MARKER} (note: what you changed; metadata: {{\"round\": {state.round}}}).")


LENSES = {
    "code-reviewer": "Your lens: correctness, the repository's tests and lint, and code that will run unattended "
                     "on a pod (paths, seeds, artifacts written to $SAGAN_ARTIFACT_DIR).",
    "code-plan-reviewer": "Your lens: statistics and plan fidelity: does the code measure what the approved plan "
                          "says (metric, baseline, seeds, sample sizes, the kill criterion), without leaks?",
}


def _reviewer_request(agent: str, state: CodeState, experiment: Experiment) -> str:
    commit = latest_commit(experiment)
    summary = next((e.note for e in reversed(cycle_of(experiment)) if e.marker == IMPLEMENTATION_MARKER), "") or ""
    earlier = _findings(CodeState(experiment, state.round, False, None), experiment) if state.round > 1 else ""
    return (f"Review code round {state.round} of #{experiment.number}: branch experiment-{experiment.number} at "
            f"{commit.short_sha if commit else 'HEAD'}. The implementer says: {summary[:2000]}\n{LENSES[agent]}\n"
            + (f"Round {state.round - 1} asked for:\n{earlier}\n" if earlier else "")
            + f"Read the plan (get_plan) and the change (git_diff). Post exactly one {REVIEWERS[agent]} marker with "
              f"review_pair code_review, round {state.round}, reviewer {agent}, a verdict and, unless you pass, the "
              "smallest required_fix that would change your verdict.")


def _reconciler_request(state: CodeState, experiment: Experiment) -> str:
    lines = []
    for agent, marker in REVIEWERS.items():
        event = state.review(marker, state.round)
        review = review_of(event) if event else {}
        lines.append(f"- {agent}: {review.get('verdict')} — {review.get('required_fix') or (event.note if event else '')}")
    rule = ("This is round 3: disagreement alone cannot block. Pick the minimal necessary fix (verdict "
            "needs_targeted_fix with reconciler_decision) or pass; block only for a decision only the owner can make."
            if state.round >= MAX_ROUNDS else "Decide whether the code passes, needs a targeted fix, or needs the owner.")
    return (f"Settle code review round {state.round} of #{experiment.number}:\n" + "\n".join(lines)
            + f"\n{rule}\nPost {RECONCILE_MARKER} with review_pair code_review, round {state.round}, reviewer "
              "reconciler, a verdict and reconciler_decision.")


# --- the tool -------------------------------------------------------------------------------------

@tool("code_step", "Advance the experiment's code loop (implement → review pair → tests → dispatch) by one step; "
                   "it starts the right sub-agent and parks you, or tells you what happened.")
def code_step(ctx: ToolContext, data: dict) -> ToolResult:
    require_tool(ctx, "code_step")
    experiment = ctx.need_experiment()
    if not settings.get("research_repo_url"):
        return ToolResult("No research repository is configured, so there is no code loop: run the branch and "
                          "commit given in the approved spec's env or set by the owner, or stop with a blocker "
                          "asking for one.", is_error=True)
    step = Step(ctx)
    for _ in range(6):  # a call may make a few moves (e.g. implementing → code_reviewing → spawn)
        if step.waiting_on or experiment.status == "blocked":
            break
        status = experiment.status
        if status == "approved":
            if not _approved(step, experiment):
                break
            continue
        state = read_state(experiment)
        if status == "implementing":
            if not _implementing(step, state, experiment):
                break
        elif status == "code_reviewing":
            if not _code_reviewing(step, state, experiment):
                break
        elif status == "testing":
            if not _testing(step, state, experiment):
                break
        else:
            step.notes.append(_done_or_elsewhere(experiment))
            break
    return step.result()


# --- back to the code after a run-time crash ----------------------------------------

TRACEBACK_START = "Traceback (most recent call last):"
CRASH_LOG_TAIL = 4000


def _traceback_of(log_text: str) -> str | None:
    """The last Python traceback in a log, through its final exception line."""
    at = log_text.rfind(TRACEBACK_START)
    if at < 0:
        return None
    lines = log_text[at:].splitlines()
    end = next((i for i, line in enumerate(lines[1:], 1)
                if line and not line.startswith((" ", "\t")) and not line.startswith(TRACEBACK_START)), len(lines) - 1)
    return "\n".join(lines[:end + 1])[-CRASH_LOG_TAIL:]


@tool("send_crash_to_code", "After a pod crashed in the research code (non-zero exit with a Python traceback), "
                            "send the failure (exit code, log tail, traceback) to a new implementation round on "
                            "the same branch; review, tests and a new dispatch of the fixed commit follow via "
                            "code_step. Counts against the recovery budget. Refused for failures that are not "
                            "the code's (capacity, a vanished pod, setup).",
      {"pod": {"type": "string", "maxLength": 200, "description": "the crashed pod's name (list_pods)"},
       "note": {"type": "string", "maxLength": 1500, "description": "your reading of the crash, for the implementer"}},
      ["pod"], own_transaction=True)
def send_crash_to_code(ctx: ToolContext, data: dict) -> ToolResult:
    require_tool(ctx, "send_crash_to_code")
    experiment = ctx.need_experiment()
    if not settings.get("research_repo_url"):
        raise ValidationError("No research repository is configured, so there is no code loop to send the crash to.")
    pod = pod_logs.pod_of_experiment(experiment.id, data["pod"])
    if pod.exit_code in (None, 0):
        raise ValidationError(f"{pod.name} did not crash (status {pod.status}, exit code {pod.exit_code}).", field="pod")
    dispatch = db.session.get(AgentRun, pod.agent_run_id) if pod.agent_run_id else None
    reason = dispatch.failure_reason if dispatch is not None else None
    if pod.status == "vanished" or reason not in recovery.CODE_FAILURE_REASONS:
        raise ValidationError(f"{pod.name}'s dispatch failed with {reason or pod.status}, which is not the research "
                              "code's failure: it does not go to the implementer. Stop with a blocker instead.",
                              field="pod")
    decision = recovery.code_fix_decision(experiment)
    if not decision.recover:
        raise ValidationError(f"Not sent to the implementer: {decision.why}. Stop with a blocker carrying the "
                              "traceback.", field="pod")
    db.session.commit()  # no transaction is held while the provider streams the log
    log = pod_logs.read_pod_logs(pod, tail=200)
    traceback = _traceback_of(log.text)
    if traceback is None:
        raise ValidationError(f"{pod.name}'s log ({log.source_words}) shows no Python traceback, so Sagan cannot "
                              "tell it is the research code's crash; read it (read_pod_logs) and stop with a blocker.",
                              field="pod")
    crash = {"pod": pod.name, "exit_code": pod.exit_code, "dispatch_run_id": str(dispatch.id),
             "commit": experiment.git_commit, "traceback": traceback,
             "log_tail": log.text[-CRASH_LOG_TAIL:], "note": (data.get("note") or "").strip() or None}
    round_ = current_round(experiment) + 1
    step = Step(ctx)
    with db.session.begin_nested():
        step.move("implementing", f"{pod.name} crashed (exit {pod.exit_code}) with a traceback in the research code; "
                                  f"back to the implementer for code round {round_} on the same branch "
                                  f"({decision.why}).", code_round=round_, crash=crash)
        child = step.start(IMPLEMENTER, _implementer_request(read_state(experiment), experiment))
        # The round resumes the crashed dispatch, so it counts as one of the experiment's
        # recoveries (recovery.recent_recoveries) and shows in the runs' resume history.
        child.resumes_run_id = dispatch.id
    db.session.commit()
    return step.result()


def _crash_findings(cycle: list[WorkflowEvent], round_: int) -> list[str]:
    """The crash that opened `round_`, as the implementer and reviewers read it."""
    lines = []
    for event in cycle:
        meta = event.metadata_ or {}
        crash = meta.get("crash")
        if event.event_type == "state_changed" and crash and int(meta.get("code_round") or 0) == round_:
            lines.append(f"- pod {crash['pod']} ran commit {str(crash.get('commit') or '?')[:12]} and exited with code "
                         f"{crash['exit_code']}. The traceback:\n```\n{crash['traceback']}\n```\n"
                         f"The end of its log:\n```\n{crash['log_tail'][-1500:]}\n```"
                         + (f"\nThe orchestrator's reading: {crash['note']}" if crash.get("note") else ""))
    return lines


def _done_or_elsewhere(experiment: Experiment) -> str:
    if experiment.git_commit and experiment.status not in CODE_STATUSES:
        return (f"The code step is done: {experiment.git_branch} at {experiment.git_commit[:12]} is in the pod spec; "
                f"#{experiment.number} is {experiment.status}.")
    return f"#{experiment.number} is {experiment.status}; the code step only runs while it is approved, implementing, " \
           "code_reviewing or testing."


def _passed_tests(experiment: Experiment) -> WorkflowEvent | None:
    """This cycle's passing, pushed test verdict for the commit the pods are set to run."""
    for event in reversed(cycle_of(experiment)):
        meta = event.metadata_ or {}
        if event.marker == TEST_MARKER and meta.get("verdict") == "pass" and meta.get("pushed") \
                and meta.get("commit") == experiment.git_commit:
            return event
    return None


def _approved(step: Step, experiment: Experiment) -> bool:
    """Back at `approved` after a gate or a block with tested code: dispatch it; otherwise
    (a fresh approval, or a loop stopped mid-way) implement, continuing the current round."""
    if experiment.git_commit and _passed_tests(experiment) is not None:
        step.notes.append(f"{experiment.git_branch} at {experiment.git_commit[:12]} already passed review and tests; "
                          "dispatching pod-provisioner")
        _start_provisioner(step, experiment, experiment.git_branch, experiment.git_commit)
        return False
    round_ = current_round(experiment)
    step.move("implementing", f"Code round {round_}: dispatching the implementer.", code_round=round_)
    return True


def _start_provisioner(step: Step, experiment: Experiment, branch: str, sha: str) -> None:
    step.start(PROVISIONER, f"Dispatch the approved pod spec of #{experiment.number}. The code is {branch} at "
                            f"commit {sha}, spliced into every pod's env (SAGAN_GIT_BRANCH, SAGAN_GIT_COMMIT). "
                            "Call launch_pods once, post epm:pod-dispatched, then wait_for_pods.")


def _implementing(step: Step, state: CodeState, experiment: Experiment) -> bool:
    """True when the status moved on (look again), False when parked or stopped."""
    if state.markers(IMPLEMENTATION_MARKER):
        # The round's work is a commit made in this round; an unchanged branch fixed nothing.
        commit = latest_commit(experiment, since=state.phase_start.created_at if state.phase_start else None)
        if commit is None:
            if _attempts_exhausted(step, state, IMPLEMENTER, "a commit"):
                return False
            step.notes.append(f"The implementer posted {IMPLEMENTATION_MARKER} but committed nothing in round "
                              f"{state.round}; asking again.")
            step.start(IMPLEMENTER, _implementer_request(state, experiment) + "\nYour last run committed nothing: "
                       "commit (git_commit) and push (git_push) before posting the marker.")
            return False
        note = f"Implementation round {state.round} landed ({commit.short_sha}); dispatching the code-review pair."
        if state.reconciled:
            note = f"Round {state.round} reconciler's fix landed ({commit.short_sha}); no further review after round 3."
        step.move("code_reviewing", note, code_round=state.round, commit=commit.sha, reconciled=state.reconciled)
        return True
    if _runs_of(experiment, IMPLEMENTER, active=True):
        step.start(IMPLEMENTER, "")  # waits for the one already working
        return False
    if _attempts_exhausted(step, state, IMPLEMENTER, IMPLEMENTATION_MARKER):
        return False
    step.start(IMPLEMENTER, _implementer_request(state, experiment))
    return False


# What the review pair's verdicts of a round lead to (review_outcome), and the reconciler's
# decision (reconciler_outcome): the decision table of the code_reviewing step, without effects.
TO_TESTING, NEXT_ROUND, RECONCILE, APPLY_RECONCILED_FIX, BLOCK = (
    "testing", "next_round", "reconcile", "apply_reconciled_fix", "block")


def review_outcome(code_round: int, verdicts: dict[str, str | None]) -> str:
    """Both pass: test. A serious verdict, or round 3 reached: ask the reconciler. Else: fix."""
    if all(v == "pass" for v in verdicts.values()):
        return TO_TESTING
    if any(v in SERIOUS for v in verdicts.values()) or code_round >= MAX_ROUNDS:
        return RECONCILE
    return NEXT_ROUND


def reconciler_outcome(code_round: int, decision: str | None) -> str:
    """pass: test. A targeted fix: another round, or after the last round the one fix applied
    without review. Anything else blocks for the owner."""
    if decision == "pass":
        return TO_TESTING
    if decision == "needs_targeted_fix":
        return NEXT_ROUND if code_round < MAX_ROUNDS else APPLY_RECONCILED_FIX
    return BLOCK


def _code_reviewing(step: Step, state: CodeState, experiment: Experiment) -> bool:
    n = state.round
    commit = latest_commit(experiment)
    sha12 = commit.short_sha if commit else "HEAD"
    if state.reconciled:
        step.move("testing", f"Running the repository's tests on {sha12} (round {n}, reconciled).", code_round=n)
        return True
    reviews = {agent: state.review(marker, n) for agent, marker in REVIEWERS.items()}
    missing = [agent for agent, event in reviews.items() if event is None]
    if missing:
        _start_reviewers(step, state, experiment, missing)
        return False
    verdicts = {agent: review_of(event).get("verdict") for agent, event in reviews.items()}
    outcome = review_outcome(n, verdicts)
    if outcome == TO_TESTING:
        step.move("testing", f"Code review pair passed round {n}; running the repository's tests on {sha12}.",
                  code_round=n)
        return True
    if outcome == NEXT_ROUND:
        step.move("implementing", f"Round {n} reviewer pair landed needs_targeted_fix; dispatching implementer "
                                  f"for round {n + 1} fixes", code_round=n + 1, verdicts=verdicts)
        return True
    return _reconciling(step, state, experiment, sha12)


def _start_reviewers(step: Step, state: CodeState, experiment: Experiment, missing: list[str]) -> None:
    """Start each reviewer that has not posted this round, unless it already failed ATTEMPTS
    times (that blocks, and the rest wait)."""
    for agent in missing:
        if not _runs_of(experiment, agent, active=True) and \
                _attempts_exhausted(step, state, agent, REVIEWERS[agent]):
            return
        step.start(agent, _reviewer_request(agent, state, experiment))


def _reconciling(step: Step, state: CodeState, experiment: Experiment, sha12: str) -> bool:
    """The review pair disagreed or raised a serious verdict: the reconciler settles it."""
    n = state.round
    reconcile = state.review(RECONCILE_MARKER, n)
    if reconcile is None:
        if not _runs_of(experiment, RECONCILER, active=True) and \
                _attempts_exhausted(step, state, RECONCILER, RECONCILE_MARKER):
            return False
        step.start(RECONCILER, _reconciler_request(state, experiment))
        return False
    decision = review_of(reconcile).get("verdict")
    outcome = reconciler_outcome(n, decision)
    if outcome == TO_TESTING:
        step.move("testing", f"Round {n} reconciler settled the review pair: pass. Running the tests on {sha12}.",
                  code_round=n)
        return True
    if outcome == NEXT_ROUND:
        step.move("implementing", f"Round {n} reconciler settled on a targeted fix; dispatching implementer "
                                  f"for round {n + 1} fixes", code_round=n + 1)
        return True
    if outcome == APPLY_RECONCILED_FIX:
        step.move("implementing", f"Round {n} reconciler picked the minimal fix; dispatching implementer to "
                                  "apply it (no review rounds after round 3)", code_round=n, reconciled=True)
        return True
    text = review_of(reconcile).get("reconciler_decision") or reconcile.note or ""
    step.block(f"Code review round {n}: the reconciler says {decision}: {text}")
    return False


def _testing(step: Step, state: CodeState, experiment: Experiment) -> bool:
    n = state.round
    verdicts = state.markers(TEST_MARKER)
    if not verdicts:
        if not _runs_of(experiment, TEST_STEP, active=True) and \
                _attempts_exhausted(step, state, TEST_STEP, TEST_MARKER):
            return False
        step.start(TEST_STEP, f"Run the repository's tests and lint on experiment-{experiment.number} (round {n}).",
                   provider="sagan")
        return False
    meta = verdicts[-1].metadata_ or {}
    sha, branch = meta.get("commit") or "", meta.get("branch") or f"experiment-{experiment.number}"
    if meta.get("verdict") == "error":
        step.block(f"The test step could not run: {meta.get('error')}")
        return False
    if meta.get("verdict") != "pass":
        if n < MAX_ROUNDS:
            step.move("implementing", f"Tests failed on {sha[:12]} in round {n}; dispatching implementer for round "
                                      f"{n + 1} fixes", code_round=n + 1)
            return True
        step.block(f"Tests still fail after round {n} on {sha[:12]}; the code needs the owner's look:\n"
                   f"{str(meta.get('output_tail') or '')[-1200:]}")
        return False
    if not meta.get("pushed"):
        step.block(f"Tests passed on {sha[:12]} but the branch could not be pushed, so pods could not check it "
                   f"out: {meta.get('push_error')}")
        return False
    if experiment.pod_free:
        # A survey or infra task is not dispatched (SPEC §2.2): the tested commit is its work,
        # and the write-up of it is its result.
        splice(experiment, branch, sha)
        step.move("clean_result_drafting", f"Code passed review and tests on {branch} at {sha[:12]} (round {n}); "
                                           f"a {experiment.kind} is not dispatched: drafting the write-up.",
                  branch=branch, commit=sha, round=n)
        step.notes.append(f"{branch} at {sha[:12]} passed; #{experiment.number} is a {experiment.kind}, so nothing is "
                          "dispatched: it is now clean_result_drafting. Spawn the analyzer to write the result.")
        return False
    if (experiment.git_branch, experiment.git_commit) != (branch, sha):
        splice(experiment, branch, sha)
        note = f"Code review pair passed round {n}; pod_spec branch/sha spliced; dispatching pod-provisioner"
        events.record(experiment, "note", step.ctx.actor, note=note,
                      metadata={"branch": branch, "commit": sha, "round": n, "run_id": str(step.ctx.run.id)})
        step.notes.append(note)
    else:
        since = verdicts[-1].created_at
        if not _runs_of(experiment, PROVISIONER, active=True) and \
                len(_runs_of(experiment, PROVISIONER, since=since, active=False)) >= ATTEMPTS:
            step.notes.append(f"{branch} at {sha[:12]} is spliced, but the pod-provisioner ended {ATTEMPTS} times "
                              "without dispatching; check list_pods and the events, or stop with a blocker.")
            return False
    _start_provisioner(step, experiment, branch, sha)
    return False


# --- splicing -------------------------------------------------------------------------------------

def splice(experiment: Experiment, branch: str, sha: str) -> None:
    """Put the tested branch and commit on the experiment and into every pod's env (SPEC §5.7).

    These four env names are the only change to an approved spec that needs no new
    approval (services.dispatch.provisioner.approved_spec ignores them).
    """
    experiment.git_branch = branch
    experiment.git_commit = sha
    spec = experiment.pod_spec
    if not spec:
        return
    pods = spec if isinstance(spec, list) else [spec]
    spliced = []
    for pod in pods:
        pod = dict(pod)
        pod["env"] = {**(pod.get("env") or {}), "SAGAN_GIT_BRANCH": branch, "SAGAN_GIT_COMMIT": sha,
                      "SAGAN_EPS_BRANCH": branch, "SAGAN_EPS_COMMIT_SHA": sha}
        spliced.append(pod)
    experiment.pod_spec = spliced if isinstance(spec, list) else spliced[0]


# --- the test step (no model; runs on the `local` queue) ------------------------------------------

def run_test_step(run_id) -> str:
    """Run the repository's test and lint commands in the sandbox, push, post epm:test-verdict."""
    run = db.session.get(AgentRun, uuid.UUID(str(run_id)))
    if run is None or run.terminal:
        return "skipped"
    if not runs.claim(run.id, ("queued", "waiting"), "running"):
        db.session.rollback()
        return "skipped"
    db.session.refresh(run)
    if run.cancel_requested_at is not None:
        effects = runs.finish_cancel(run, Actor.owner_like())
        db.session.commit()
        lifecycle.run_side_effects(effects)
        return "cancelled"
    runs.append_event(run.id, "started", f"kind={run.kind}", {"agent": TEST_STEP, "model": None})
    experiment = db.session.get(Experiment, run.scope_id)
    db.session.commit()
    app = current_app._get_current_object()
    with Heartbeat(app, run.id, app.config["HEARTBEAT_SECONDS"]):
        metadata, summary = _test_and_push(run, experiment)
    actor = Actor("agent", str(run.id), TEST_STEP)
    markers.post_marker(experiment, TEST_MARKER, actor, note=summary[:1900], metadata=metadata)
    db.session.refresh(run)
    if run.status == "running":  # not cancelled while the tests ran (the verdict is a fact either way)
        runs.set_status(run, "completed")
        runs.append_event(run.id, "completed", summary)
    parent_id = run.parent_run_id
    db.session.commit()
    if parent_id is not None:
        wake_parent_if_ready(parent_id)
    return metadata["verdict"]


def _test_and_push(run: AgentRun, experiment: Experiment) -> tuple[dict, str]:
    n = current_round(experiment)
    base = {"round": n, "run_id": str(run.id), "branch": f"experiment-{experiment.number}"}
    target = workspaces.Target.of(experiment)
    try:
        repo = workspaces.repo_settings()
        commands = code_tools.configured_commands()
        # No transaction while git and the tests run (on SQLite it would hold the write lock);
        # each command's events are committed before it starts.
        db.session.commit()
        with workspaces.locked(target):
            ws = workspaces.ensure(target, repo)
            workspaces.check_no_nested_git(ws)
            sha = workspaces.head(ws)
            base.update(commit=sha, branch=ws.branch)
            dirty = workspaces.dirty_tracked(ws)
            if dirty:
                message = ("Uncommitted changes to tracked files: " + ", ".join(dirty[:20])
                           + ". Commit or revert them; the tests run on a commit.")
                return {**base, "verdict": "fail", "output_tail": message, "checks": []}, \
                    f"Tests not run on {sha[:12]}: {message}"
            checks, tails = [], []
            for role, command in commands.items():
                runs.append_event(run.id, "tool_call", "run_command",
                                  {"tool": "run_command", "input": {"command": command, "role": role}})
                db.session.commit()  # the page shows what runs while it runs
                outcome = sandbox.run(ws.path, ["sh", "-c", command], writable=True, shown_as=command)
                runs.append_event(run.id, "tool_result", outcome.describe(),
                                  {"tool": "run_command", "is_error": not outcome.ok})
                db.session.commit()
                checks.append({"role": role, "command": command, "exit_code": outcome.exit_code,
                               "timed_out": outcome.timed_out, "output_capped": outcome.output_capped,
                               "disk_capped": outcome.disk_capped,
                               "seconds": round(outcome.seconds, 2), "ok": outcome.ok})
                tails.append(f"$ {command}\n{outcome.tail(3000)}\n{outcome.status_line()}")
            passed = all(c["ok"] for c in checks)
            result = {**base, "verdict": "pass" if passed else "fail", "checks": checks,
                      "output_tail": "\n\n".join(tails)[-6000:], "pushed": False}
            ran = ", ".join(f"{c['role']} `{c['command']}`: exit {c['exit_code']}"
                            + (" (timed out)" if c["timed_out"] else "") for c in checks) \
                or "no test or lint command is configured, so nothing ran"
            if not passed:
                return result, f"Tests failed on {sha[:12]} (round {n}): {ran}."
            db.session.commit()
            try:
                workspaces.push(ws)
                if sha != workspaces.base_commit(ws):  # the branch has commits of its own
                    code_tools.record_commit(ws, experiment, sha, agent=None, run_id=None)
                code_tools.mark_pushed(experiment, ws.branch)
                result["pushed"] = True
            except SaganError as exc:
                result["push_error"] = exc.message[:2000]
            pushed = "pushed" if result["pushed"] else f"NOT pushed: {result.get('push_error')}"
            return result, f"Tests passed on {sha[:12]} (round {n}): {ran}; {ws.branch} {pushed}."
    except SaganError as exc:
        return {**base, "verdict": "error", "error": exc.message[:2000], "checks": []}, \
            f"The test step could not run: {exc.message}"


# --- queues, hooks --------------------------------------------------------------------------------

def enqueue_workspace_removal(experiment_id) -> str:
    return jobs.enqueue_unique(jobs.LOCAL, "workers.code.remove_workspace", str(experiment_id),
                               job_id=f"workspace-remove-{experiment_id}")


def on_close_remove_workspace(experiment_id, actor, metadata):
    """A closed or promoted experiment's worktree is removed on the host that has it."""
    if settings.get("research_repo_url"):
        enqueue_workspace_removal(experiment_id)


def remove_workspace(experiment_id) -> bool:
    experiment = db.session.get(Experiment, uuid.UUID(str(experiment_id)))
    return bool(experiment) and workspaces.remove(experiment)
