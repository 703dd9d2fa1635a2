"""Demo data: a curated board for newcomers, and bulk data for benchmarks.

The curated demo walks each experiment through real transitions (the same table the
product enforces), so its timelines are exactly what a user would see. The bulk loader
writes rows directly in batches — it exists to fill a database for benchmarks quickly.
"""
from __future__ import annotations

import random
import uuid
from collections import deque
from datetime import timedelta

import sqlalchemy as sa

from models import Experiment, Pod, PodProgressPost, WorkflowEvent, db
from models.research import Belief, RecordLink
from services.core import pod_accounts, registry
from services.core.actors import Actor
from services.core.clock import utcnow
from services.day import daily_log, weekly_review
from services.dispatch import metrics, pod_secrets
from services.dispatch.provisioner import PROVISIONER
from services.pipeline import demo_ideation, demo_research, demo_todos
from services.planning import approvals, questions
from services.research import beliefs, links
from services.workflow import experiments, lifecycle, runs

DEMO_AGENT = Actor("agent", None, "demo agent")
DEMO_SYSTEM = Actor.system("Sagan (demo)")
DEMO_OWNER = Actor("owner", None, "demo owner")
_ACTORS = {"owner": DEMO_OWNER, "agent": DEMO_AGENT, "system": DEMO_SYSTEM}
# What the demo's planner asks an experiment it leaves waiting for answers (Today answers them in place).
DEMO_QUESTIONS = [
    {"key": "baseline", "text": "Which checkpoint is the baseline: the base model or the instruction-tuned one?"},
    {"key": "budget", "text": "How many seeds can the budget take: three or five?"},
]

CURATED = [
    ("Does label smoothing help the 2-layer probe on CIFAR-10?", "proposed", "experiment", ["probes"]),
    ("Survey: what sparsity schedules do recent pruning papers use?", "proposed", "survey", ["pruning"]),
    ("Is the warmup length driving the loss spike at step 4k?", "clarifying", "experiment", ["optim"]),
    ("Do attention sinks survive fine-tuning at 8k context?", "awaiting_clarifications", "experiment", ["attention"]),
    ("Factor screen: LR × batch size × weight decay on 4 pods", "planning", "experiment", ["optim", "screen"]),
    ("Reclassify the survey corpus with the new taxonomy", "plan_pending", "survey", ["survey"]),
    ("Does the sparse autoencoder recover the planted features?", "plan_pending", "experiment", ["sae"]),
    ("Set up nightly eval harness on the shared volume", "implementing", "infra", ["infra"]),
    ("Ablate positional encodings in the 125M model", "code_reviewing", "experiment", ["ablation"]),
    ("Seed variance of the probe accuracy across 10 seeds", "running", "experiment", ["probes"]),
    ("Gradient noise scale vs. batch size on the 350M model", "verifying", "experiment", ["optim"]),
    ("Mixed precision drift over 100k steps", "interpreting", "experiment", ["numerics"]),
    ("Tokenizer fertility across 12 languages", "reviewing", "survey", ["data"]),
    ("Curriculum ordering changes final loss by <1% (MODERATE confidence)", "awaiting_promotion", "experiment", ["curriculum"]),
    ("Dropout sweep crashed on the A100 pool", "blocked", "experiment", ["regularization"]),
    ("Weight decay does not explain the grokking delay (HIGH confidence)", "shared", "experiment", ["grokking"]),
    ("Data loader throughput doubled with pinned memory", "done_impl", "infra", ["infra"]),
    ("Longer warmup removes the step-4k spike (LOW confidence)", "completed", "experiment", ["optim"]),
    ("Early idea: contrastive probes", "archived", "experiment", ["probes"]),
]


# The plan every curated experiment past planning carries (an approval card always has one).
DEMO_PLAN = """## Goal

Show what a finished plan looks like on the board (demo data).

## Hypothesis

The effect under study is larger than seed-to-seed noise.

## Prediction

The difference between arms exceeds two standard deviations of the seed spread.

## Kill Criterion

Stop if the first seed fails to produce a metrics file.

## Experimental Setup

One pod, three seeds, the same data order within a seed.

## Compute and Hardware

One small GPU for about 20 minutes.

## Artifacts

- `metrics.json` per seed

## Verification

Every seed's metrics file exists and reports accuracy between 0 and 1.

## Risks and Red Team

Data order could leak across seeds; the setup fixes it per seed.

## Likely Clean Result

A dot plot of the three seeds with the mean.

## Approval Checklist

- [x] Goal and hypothesis match the record
- [ ] The budget is acceptable

```runpod-spec
[{"name": "demo-seeds", "gpuType": "RTX 4090", "gpuCount": 1, "volumeGb": 10, "containerDiskGb": 10,
  "cloudType": "SECURE", "estimatedMinutes": 20, "dockerArgs": "bash -lc 'python3 probe.py'"}]
```
"""


def path_to(start: str, target: str, status_before_block: str | None = None,
            kind: str = "experiment") -> list[tuple[str, str]]:
    """Shortest list of (status, role) steps from `start` to `target` in the transition table,
    for an experiment of `kind` (surveys and infra tasks have no pod statuses on their way)."""
    queue = deque([(start, [])])
    seen = {start}
    while queue:
        status, steps = queue.popleft()
        if status == target:
            return steps
        probe = Experiment(status=status, status_before_block=status_before_block, number=0, kind=kind)
        for role in ("owner", "agent", "system"):
            for move in lifecycle.allowed_moves(probe, role):
                # Walk the workflow forward: detours through blocked or a finished status
                # would make timelines no real experiment has.
                if move.to != target and (move.to == "blocked" or move.to in registry.TERMINAL_STATUSES):
                    continue
                if move.to not in seen:
                    seen.add(move.to)
                    queue.append((move.to, steps + [(move.to, role)]))
    raise ValueError(f"no path from {start} to {target}")


def walk_to(experiment: Experiment, target: str) -> None:
    """Move an experiment to `target` through real transitions, committing each step."""
    kind = experiment.kind or "experiment"
    via = ("implementing" if kind in registry.POD_FREE_KINDS else "running") if target == "blocked" else None
    steps = path_to(experiment.status, via, kind=kind) + [("blocked", "agent")] if via else \
        path_to(experiment.status, target, kind=kind)
    for status, role in steps:
        note = None
        if status == "blocked":
            note = "Pod exited with code 1 (CUDA out of memory); see the run for the stderr tail."
        else:
            rule = lifecycle.rule_for_move(experiment, status, role)
            if rule and rule.note_required:
                note = "Demo: moved for the tour."
        if status == "plan_pending":
            # A real plan and its approval request, as the planner's would be.
            # The demo's own plan, rendered in this seeding transaction (it has written already).
            plan = approvals.prepare_plan_text(DEMO_PLAN, experiment.kind, experiment.pod_account,
                                               pod_secrets.allowlist())
            approvals.submit_plan(experiment, plan, DEMO_AGENT, source="agent")
        elif status == "awaiting_clarifications":
            questions.ask(experiment, DEMO_QUESTIONS, _ACTORS[role])
        elif status == "approved" and experiment.status in ("plan_pending", "awaiting_approval"):
            approval = approvals.take_for_demo(experiment, DEMO_OWNER)
            lifecycle.transition(experiment, status, DEMO_OWNER, note="Demo: plan approved for the tour.",
                                 metadata={"approval_request_id": str(approval.id)})
        else:
            lifecycle.transition(experiment, status, _ACTORS[role], note=note)
        db.session.flush()


def load_curated() -> int:
    """Create the curated demo experiments (idempotent: skipped if they exist)."""
    existing = set(db.session.scalars(sa.select(Experiment.title)))
    count = 0
    for title, status, kind, tags in CURATED:
        if title in existing:
            continue
        experiment = experiments.create_experiment(
            {"title": title, "kind": kind, "tags": tags + ["demo"],
             "priority": random.Random(title).choice(registry.PRIORITIES),
             "hypothesis": "Demo experiment — the data is illustrative."}, DEMO_OWNER,
            note="Demo experiment created.")
        walk_to(experiment, status)
        _demo_dispatch(experiment)
        db.session.commit()
        count += 1
    # The research record around them (a project, beliefs with evidence, a narrative), and the owner's todos.
    demo_research.load_research_record()
    demo_todos.load_todos()
    demo_ideation.load_ideation()
    return count


def draft_weekly_review():
    """The demo's week as a weekly review, drafted once (SPEC §12.3); with the scripted agents
    (make demo) the weekly-review agent then writes its version and classifies the week's runs."""
    return weekly_review.draft(weekly_review.week_end_for(daily_log.today()), "demo")[0]


def _demo_account() -> str:
    """The demo's pods run on this host: nothing it shows ever bills."""
    return pod_accounts.on_host()[0]


# What the curated experiments past dispatch show in their Pods panel and on their card
# (ARCHITECTURE: the demo has "pods with progress"; a "running" card said "No pods
# dispatched"): one local pod each, with the epochs it posted. They are records only, as
# the rest of the curated data: no process stands behind them, so they carry no provider
# id (the watcher asks a provider only about pods it knows), the dispatch run waits on
# nothing a sweep acts on, and the running pod's heartbeat goes stale as a real pod's
# would if it stopped posting.
_DISPATCH_OUTCOMES = {"running": "running", "verifying": "finished", "interpreting": "finished",
                      "awaiting_promotion": "finished", "shared": "finished", "completed": "finished",
                      "blocked": "crashed"}
_EPOCHS = {"running": (6, 10), "finished": (10, 10), "crashed": (3, 10)}  # posted, of


def _demo_dispatch(experiment: Experiment) -> None:
    outcome = _DISPATCH_OUTCOMES.get(experiment.status)
    if outcome is None or experiment.pod_free:
        return
    now = utcnow()
    posted, total = _EPOCHS[outcome]
    started = now - timedelta(minutes=3 + 2 * posted)
    run_status = {"running": "waiting", "finished": "completed", "crashed": "failed"}[outcome]
    run = runs.create_run(kind="experiment", agent=PROVISIONER, request="Demo: dispatch of the approved spec.",
                          scope_id=experiment.id, pod_account=_demo_account(), status=run_status)
    run.started_at = started
    if outcome == "crashed":
        run.failure_reason, run.last_error = "pod_exit_nonzero", "Pod exited with code 1: CUDA out of memory."
    if run.terminal:
        run.completed_at = now
    rng = random.Random(experiment.title)
    pod = Pod(agent_run_id=run.id, experiment_id=experiment.id, account=_demo_account(),
              name=f"sagan-{experiment.number}-demo-0", gpu_count=1, status="running",
              last_started_at=started, uptime_seconds=int((now - started).total_seconds()),
              metadata_={"demo": True})
    db.session.add(pod)
    db.session.flush()
    loss = 2.3
    for epoch in range(1, posted + 1):
        loss *= 0.8 + 0.05 * rng.random()
        at = started + timedelta(minutes=2 * epoch)
        pct = round(100 * epoch / total, 1)
        message = f"epoch {epoch}/{total} · loss {loss:.3f}"
        db.session.add(PodProgressPost(pod_id=pod.id, seq=epoch, progress_pct=pct, message=message,
                                       milestone="epoch", metrics={"loss": round(loss, 4)}, created_at=at))
        pod.progress_pct, pod.progress_message, pod.progress_seq = pct, message, epoch
        pod.last_progress_at = pod.last_heartbeat_at = at
    if outcome == "running":
        pod.last_heartbeat_at = now
        return
    ended = started + timedelta(minutes=2 * posted + 1)
    if experiment.status in _SEED_SCREENS:
        _seed_screen(experiment, run, pod, started, ended)
    pod.exit_code = 0 if outcome == "finished" else 1
    pod.progress_message = ("experiment finished" if outcome == "finished"
                            else "experiment exited with code 1 · err: CUDA out of memory")
    pod.exited_at = pod.stopped_at = ended
    pod.status, pod.stop_reason = "stopped", ("completed" if outcome == "finished" else "failure")
    pod.uptime_seconds = int((ended - started).total_seconds())
    db.session.add(PodProgressPost(pod_id=pod.id, seq=posted + 1, progress_pct=pod.progress_pct,
                                   message=pod.progress_message, exit_code=pod.exit_code, created_at=ended))


# Two finished demo experiments ran a small factor screen — two conditions × three seeds,
# six local pods — whose curves the compare view groups by seed or by condition: the
# condition each pod ran and its seed are its configuration (services/dispatch/run_config.py).
_SEED_SCREENS = {"interpreting": ("precision", ("bf16", "fp32")),
                 "awaiting_promotion": ("order", ("random", "curriculum"))}
_SCREEN_STEPS = range(0, 2000, 20)


def _seed_screen(experiment: Experiment, run, first: Pod, started, ended) -> None:
    key, conditions = _SEED_SCREENS[experiment.status]
    rng = random.Random(experiment.title + "/screen")
    index = 0
    for condition_index, condition in enumerate(conditions):
        for seed in range(3):
            if index == 0:
                pod = first
            else:
                pod = Pod(agent_run_id=run.id, experiment_id=experiment.id, account=_demo_account(), run_index=index,
                          name=f"sagan-{experiment.number}-demo-{index}", gpu_count=1, status="stopped",
                          stop_reason="completed", exit_code=0, progress_pct=100.0,
                          progress_message="experiment finished", last_started_at=started, exited_at=ended,
                          stopped_at=ended, uptime_seconds=int((ended - started).total_seconds()))
                db.session.add(pod)
                db.session.flush()
            pod.metadata_ = {**(pod.metadata_ or {}), "commit": "5e3d1c2a9b8f7e6d",
                             "config": {"seed": seed, key: condition}}
            # Each seed a little faster or slower; the second condition a small real gain.
            rate, floor = 0.0022 * (1 + 0.12 * (seed - 1)), 0.42 - 0.05 * condition_index
            points = []
            for step in _SCREEN_STEPS:
                loss = floor + 1.9 * pow(2.718281828, -rate * step) + rng.gauss(0, 0.03)
                points.append({"step": step, "name": "loss", "value": round(loss, 4)})
                if step % 200 == 0:
                    accuracy = 100 * (0.9 - 0.5 * pow(2.718281828, -rate * step)) + 2 * condition_index \
                        + rng.gauss(0, 0.6)
                    points.append({"step": step, "name": "val/accuracy [%]", "value": round(accuracy, 2)})
            metrics.record_batch(pod, metrics.parse_batch({"seq": 1, "points": points}))
            index += 1


def load_scale(count: int, *, seed: int = 7, events_per_experiment: int = 3,
               batch: int = 1000) -> int:
    """Insert `count` experiments spread over every status, with a few events each."""
    rng = random.Random(seed)
    # ~10% active, the rest finished: the shape of a research log after a year or two.
    active = [s for s in registry.STATUS_NAMES if s not in registry.TERMINAL_STATUSES]
    finished = sorted(registry.TERMINAL_STATUSES)
    now = utcnow()
    made = 0
    while made < count:
        rows, event_rows = [], []
        for _ in range(min(batch, count - made)):
            status = rng.choice(active) if rng.random() < 0.1 else rng.choice(finished)
            stamp = now - timedelta(minutes=rng.randint(0, 60 * 24 * 365))
            exp_id = uuid.uuid4()
            rows.append({
                "id": exp_id, "number": experiments.next_number(), "status": status,
                "title": f"Bench experiment {rng.randint(1, 10**9)} on {rng.choice(['probes', 'optim', 'sae', 'data'])}",
                "kind": rng.choice(registry.EXPERIMENT_KINDS), "priority": rng.choice(registry.PRIORITIES),
                "assignee_kind": "agent", "pod_account": _demo_account(),
                "tags": [rng.choice(["probes", "optim", "sae", "data", "infra"])],
                "has_clean_result": False, "auto_approve_plan": False,
                "status_before_block": "running" if status == "blocked" else None,
                "created_at": stamp, "updated_at": stamp, "last_event_at": stamp,
            })
            for i in range(events_per_experiment):
                event_rows.append({
                    "id": uuid.uuid4(), "entity_kind": "experiment", "entity_id": exp_id,
                    "experiment_id": exp_id, "event_type": "note", "actor_kind": "system",
                    "note": f"Bench event {i}", "created_at": stamp, "updated_at": stamp,
                })
        db.session.execute(sa.insert(Experiment), rows)
        db.session.execute(sa.insert(WorkflowEvent), event_rows)
        db.session.commit()
        made += len(rows)
    return made


JOURNEY_TITLE = "Demo journey: do two seeds of the probe agree?"
# The second journey: its pods run a short probe that crashes at the reviewed commit, so the
# crash goes back to the implementer and the fixed commit runs (scripts/demo_agents.py).
SHORT_RUN_TITLE = "Demo journey 2: does a two-epoch probe already separate the seeds?"


DEMO_BELIEF_TITLE = "The probe is stable across seeds"


def ensure_journey_experiment() -> int:
    """The idea `make demo` starts from: proposed, on the local pod account, testing a belief
    (so its analyzer proposes an update to it for the owner, SPEC §11.2)."""
    number = _ensure_idea(JOURNEY_TITLE, "Two seeds of the probe land within two points of accuracy.")
    _ensure_tested_belief(number)
    return number


def _ensure_tested_belief(number: int) -> None:
    belief = db.session.scalar(sa.select(Belief).where(Belief.title == DEMO_BELIEF_TITLE))
    if belief is None:
        project = demo_research.research_project()
        belief = beliefs.create_belief({
            "title": DEMO_BELIEF_TITLE, "status": "active", "confidence": "LOW",
            "project": project.slug if project else None,
            "current_belief": "Two seeds of the probe land within two points of accuracy.",
            "next_test": "Run two seeds and compare their final accuracy."}, DEMO_OWNER)
    experiment = links.describe("experiment", experiments.get_experiment(number))
    tested = links.describe("belief", belief)
    already = db.session.scalar(sa.select(RecordLink.id).where(
        RecordLink.source_id == experiment.id, RecordLink.target_id == tested.id, RecordLink.kind == "tests"))
    if already is None:
        links.create_link(experiment, "tests", tested, DEMO_OWNER, "The demo journey tests it.")
    db.session.commit()


def ensure_short_run_experiment() -> int:
    """The second demo idea (with the code-writing stage): a two-epoch probe, whose first
    dispatch crashes in the research code and comes back to the implementer."""
    return _ensure_idea(SHORT_RUN_TITLE, "After two epochs the seeds already rank as they do after eight.")


def _ensure_idea(title: str, hypothesis: str) -> int:
    existing = db.session.scalar(sa.select(Experiment).where(Experiment.title == title))
    if existing is not None:
        return existing.number
    experiment = experiments.create_experiment(
        {"title": title, "kind": "experiment", "pod_account": _demo_account(), "priority": "high",
         "tags": ["demo"], "hypothesis": hypothesis},
        DEMO_OWNER, note="Demo journey created: move it to Clarifying to start the scripted agents.")
    project = demo_research.research_project()
    if project is not None:
        experiment.project_id = project.id
    db.session.commit()
    return experiment.number
