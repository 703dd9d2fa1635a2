"""The provisioner (SPEC §6.3–6.4): dispatches the approved spec as a saga.

1. attempt each pod over its candidates, writing the Pod row before the create call, and
   after an error waiting out the listing lag and looking the pod up by name (providers
   sometimes create the pod and still answer 5xx);
2. commit when every pod exists: `deploy_*` events, experiment → `queued`;
3. all or nothing: a pod that cannot be created stops the survivors and blocks the
   experiment with the partial-dispatch note; no automatic re-dispatch follows.
One live dispatch per experiment is enforced by a partial unique index on agent_runs.
"""
from __future__ import annotations

import base64
import logging
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import sqlalchemy as sa
from flask import current_app
from redis.exceptions import RedisError
from sqlalchemy.exc import IntegrityError

from models import AgentRun, Experiment, Pod, RunEvent, db
from services.core import events, pod_accounts, registry, settings
from services.core.actors import Actor
from services.core.clock import utcnow
from services.core.errors import Conflict
from services.dispatch import (
    costs,
    pod_secrets,
    preflight,
    recovery,
    run_config,
    spend,
    ssh_keys,
    tokens,
    verify,
)
from services.dispatch import spec as specs
from services.dispatch.backends import BackendError, PodRequest, backend_for
from services.dispatch.terms import approved_terms
from services.workflow import jobs, lifecycle, markers, runs
from services.workflow.parking import Heartbeat, wake_parent_if_ready

log = logging.getLogger(__name__)

MAX_CANDIDATES = 25
GIT_ENV = specs.GIT_ENV
DEFAULT_IMAGE = "runpod/pytorch:2.4.0-py3.11-cuda12.4.1-devel-ubuntu22.04"
BOOTSTRAP = Path(__file__).resolve().parents[2] / "scripts" / "pod_bootstrap.sh"
PARTIAL_NOTE = ("Partial RunPod dispatch: {up}/{total} pods came up. Survivors were stopped because the plan "
                "was designed around {total} partitions and proceeding with fewer would corrupt the result. "
                "Re-approve the plan to retry.")
ACTIVE_DISPATCH = registry.RUN_ACTIVE_STATUSES
PROVISIONER = "provisioner"

# Injectable so tests wait out the listing lag on the fake provider's clock, not in real time.
sleep = time.sleep


@dataclass(frozen=True)
class Candidate:
    account: str
    gpu: specs.Gpu
    cloud: str
    gpu_count: int
    volume_gb: int
    disk_gb: int

    def describe(self) -> str:
        return f"{self.gpu_count}× {self.gpu.short} on {self.cloud} ({self.account})"


# --- candidates ----------------------------------------------------------------------------------

def candidates(pod: dict, account: str, prices: dict | None = None) -> list[Candidate]:
    """Spec + substitution policy → ordered candidates (SPEC §6.3), at most 25.

    Preferred account, the spec's GPU and the preferred cloud come first; then the other
    allowed GPUs by price (unknown prices last); then the other clouds; then the other
    accounts.
    """
    prices = prices or {}
    policy = pod.get("substitution_policy") or {}
    own_gpu = specs.find_gpu(pod.get("gpuType"))
    gpu_policy = policy.get("gpuType") or {}
    allowed = [specs.find_gpu(n) for n in gpu_policy.get("allowed") or []] or [own_gpu]
    min_vram = gpu_policy.get("min_vram_gb") or 0
    others = sorted({g for g in allowed if g and g != own_gpu and g.vram_gb >= min_vram},
                    key=lambda g: (prices.get(g.short) is None, prices.get(g.short) or 0, g.short))
    gpus = [own_gpu] + others

    cloud_policy = policy.get("cloudType") or {}
    own_cloud = pod.get("cloudType") or "SECURE"
    preferred_cloud = cloud_policy.get("prefer") or own_cloud
    clouds = [preferred_cloud] + [c for c in (cloud_policy.get("allowed") or [own_cloud]) if c != preferred_cloud]

    account_policy = policy.get("account") or {}
    preferred_account = account_policy.get("prefer") or account
    accounts = [preferred_account] + [a for a in (account_policy.get("allowed") or [account])
                                      if a != preferred_account]

    volume = max(pod.get("volumeGb") or 0, (policy.get("volumeGb") or {}).get("min") or 0)
    disk = max(pod.get("containerDiskGb") or 20, (policy.get("containerDiskGb") or {}).get("min") or 0)
    count = pod.get("gpuCount") or 1
    result: list[Candidate] = []
    for acct in accounts:
        for cloud in clouds:
            for gpu in gpus:
                candidate = Candidate(acct, gpu, cloud, count, volume, disk)
                if candidate not in result:
                    result.append(candidate)
    return result[:MAX_CANDIDATES]


# --- what may be dispatched -----------------------------------------------------------------------

def approved_spec(experiment: Experiment):
    """The spec of the approved plan version; refuses a spec or account changed after approval."""
    terms = approved_terms(experiment)
    if terms is None:
        raise Conflict(f"#{experiment.number} has no approved runpod-spec to dispatch; approve a plan with one.",
                       code="no_approved_spec")
    approved = terms.spec
    if experiment.pod_account != terms.account:
        raise Conflict(f"#{experiment.number}'s pod account is {experiment.pod_account} but its plan was "
                       f"approved for {terms.account}; an account change needs a new plan and approval.",
                       code="account_changed")
    if specs.without_git_env(experiment.pod_spec) != specs.without_git_env(approved):
        raise Conflict(f"#{experiment.number}'s pod spec was changed after approval; only the branch/commit "
                       "variables may change without re-approval. Submit the change as a new plan.",
                       code="spec_changed")
    return approved


# --- starting a dispatch ------------------------------------------------------------------------

def live_dispatch(experiment_id) -> AgentRun | None:
    return db.session.scalar(sa.select(AgentRun).where(
        AgentRun.scope_kind == "experiment", AgentRun.scope_id == experiment_id, AgentRun.kind == "experiment",
        AgentRun.status.in_(ACTIVE_DISPATCH)).limit(1))


def launch(experiment: Experiment, actor: Actor, *, parent_run_id=None) -> tuple[AgentRun | None, list]:
    """Create the dispatch run (or gate the experiment) and queue the saga. Caller commits.

    Returns (run, effects). A second request while a dispatch is live is a Conflict naming it.
    """
    if experiment.pod_free:
        raise Conflict(f"#{experiment.number} is a {experiment.kind}: its result is a write-up and nothing is "
                       "dispatched. Move it to clean_result_drafting when the work is done.", code="pod_free")
    spec = approved_spec(experiment)
    may_use = costs.accounts_of(specs.as_pods(spec) or [], experiment.pod_account)
    if any(pod_accounts.on_this_host(a) for a in may_use) and actor.kind != "owner" and experiment.auto_approve_plan:
        # Its account policy's fallbacks count: a plan asking RunPod first may still end on this host.
        raise Conflict("An auto-approved plan never dispatches to the local backend.", code="local_refused")
    gate = _gate_reason(experiment)
    if gate:
        effects = []
        if experiment.status in ("approved", "testing", "implementing"):
            effects = lifecycle.transition(experiment, "gate_pending", Actor.system(), note=gate)
        return None, effects
    existing = live_dispatch(experiment.id)
    if existing is not None:
        raise Conflict(f"#{experiment.number} already has a live dispatch ({existing.short_id}); stop its pods first.",
                       code="dispatch_active", run_id=str(existing.id))
    try:
        with db.session.begin_nested():
            run = runs.create_run(kind="experiment", agent=PROVISIONER, scope_id=experiment.id,
                                  request=f"Dispatch the approved spec of #{experiment.number}.",
                                  parent_run_id=parent_run_id, pod_account=experiment.pod_account)
            run.provider = "sagan"
    except IntegrityError:
        existing = live_dispatch(experiment.id)
        raise Conflict(f"#{experiment.number} already has a live dispatch"
                       f"{f' ({existing.short_id})' if existing else ''}; stop its pods first.",
                       code="dispatch_active", run_id=str(existing.id) if existing else None) from None
    if experiment.status == "approved":
        lifecycle.transition(experiment, "implementing", Actor.system(),
                             note=f"Dispatch {run.short_id} started with the approved spec.")
    events.record(experiment, "note", actor, note=f"Dispatch {run.short_id} queued.",
                  metadata={"run_id": str(run.id)})
    return run, [lifecycle.SideEffect("enqueue_dispatch", experiment.id, actor, {"run_id": str(run.id)})]


def _gate_reason(experiment: Experiment) -> str | None:
    terms = approved_terms(experiment)
    if terms is not None and experiment.cost_cap_usd is None \
            and costs.is_paid(costs.accounts_of(specs.as_pods(terms.spec) or [], terms.account)):
        return (f"Dispatch paused: the approved plan's cost is unknown and it may run on a paid account "
                f"({terms.account}). Set a cost cap on #{experiment.number}, then move it back to Approved.")
    if recovery.fleet_incident_open():
        return "Dispatch paused: a fleet incident is open. Resolve it to continue."
    if recovery.spend_cap_reached(experiment):
        return (f"Dispatch paused: #{experiment.number} has spent ${spend.experiment_spend(experiment.id):.2f} "
                f"of its ${experiment.cost_cap_usd:.2f} cap. Raise the cap to continue.")
    daily = settings.get("daily_cap_usd")
    if daily and spend.spend_today() >= float(daily):
        return f"Dispatch paused: today's spend reached the daily cap of ${float(daily):.2f}."
    return None


def dispatch_job_id(run_id) -> str:
    return f"dispatch-{run_id}"


def is_dispatch(run: AgentRun) -> bool:
    """A dispatch run (the provisioner's saga), as opposed to an agent run."""
    return run.kind == "experiment" and run.agent == PROVISIONER


def dispatch_queue(run_id) -> str:
    """Where a dispatch runs: pods on this host are started by the `local` queue's worker (the one
    that may be root: it starts them as their own user behind the packet filter); pods elsewhere
    by any worker on `dispatch`, which never needs root. A plan whose account policy may fall
    back to this host goes to `local` too, whatever account it asks first: a worker on
    `dispatch` would reach the local candidate only to be refused it."""
    run = db.session.get(AgentRun, uuid.UUID(str(run_id)))
    if run is None:
        return jobs.DISPATCH
    return jobs.LOCAL if any(pod_accounts.on_this_host(a) for a in accounts_it_may_use(run)) else jobs.DISPATCH


def accounts_it_may_use(run: AgentRun) -> set[str]:
    """The accounts a dispatch may create pods on: the run's, and every one the approved plan's
    account policies allow as a fallback."""
    experiment = db.session.get(Experiment, run.scope_id) if run.scope_id else None
    terms = approved_terms(experiment) if experiment is not None else None
    if terms is None:
        return {run.pod_account}
    return {run.pod_account} | costs.accounts_of(specs.as_pods(terms.spec) or [], terms.account)


def enqueue_dispatch(run_id) -> str:
    return jobs.enqueue_unique(dispatch_queue(run_id), "workers.dispatch.run_dispatch", str(run_id),
                               job_id=dispatch_job_id(run_id))


# --- the saga -------------------------------------------------------------------------------------

def pod_env(experiment: Experiment, run: AgentRun, pod_spec: dict, index: int, name: str,
            token: str) -> dict[str, str]:
    """Everything a pod is told (SPEC §6.5), the same on every backend (a local pod's sandbox
    shows it /workspace too); named secrets come from the server environment."""
    base = current_app.config["SAGAN_BASE_URL"].rstrip("/")
    env = {k: str(v) for k, v in (pod_spec.get("env") or {}).items()}
    branch = experiment.git_branch or env.get("SAGAN_GIT_BRANCH") or env.get("SAGAN_EPS_BRANCH") or ""
    commit = experiment.git_commit or env.get("SAGAN_GIT_COMMIT") or env.get("SAGAN_EPS_COMMIT_SHA") or ""
    env.update({
        "SAGAN_PROGRESS_URL": f"{base}/api/progress", "SAGAN_ARTIFACT_URL": f"{base}/api/artifacts",
        "SAGAN_POD_PROGRESS_TOKEN": token, "SAGAN_AGENT_RUN_ID": str(run.id),
        "SAGAN_EXPERIMENT_ID": str(experiment.id), "SAGAN_EXPERIMENT_NUMBER": str(experiment.number),
        "SAGAN_RUN_INDEX": str(index), "SAGAN_POD_NAME": name,
        # Local pods see their own folder at /workspace too (their sandbox), so both look alike.
        "SAGAN_ARTIFACT_DIR": "/workspace/sagan-artifacts", "SAGAN_WORKDIR": "/workspace",
        "SAGAN_KEEP_ALIVE_MINUTES": str(pod_spec.get("keepAliveMinutes", 10)),
        # The approved code, under the new and the old system's names (SPEC §5.7).
        "SAGAN_GIT_BRANCH": branch, "SAGAN_GIT_COMMIT": commit,
        "SAGAN_EPS_BRANCH": branch, "SAGAN_EPS_COMMIT_SHA": commit,
    })
    # Only names on the owner's allowlist, never Sagan's own (checked again here: the list
    # may have shrunk since the plan was approved).
    secret_names = pod_secrets.for_pod(pod_spec.get("secrets"))
    repo = settings.get("research_repo_url")
    if repo:
        env["SAGAN_REPO_URL"] = repo  # the checkout goes on the volume: it survives a restart
        if settings.get("research_repo_dir"):
            env["SAGAN_REPO_NAME"] = settings.get("research_repo_dir")
        # A private repository: the owner named the variable holding the deploy token or key;
        # the pod gets its value as a secret and the bootstrap hands it to git by name.
        # Sagan's own secrets are refused here too, whatever the setting says.
        for setting, pointer in (("research_repo_token_env", "SAGAN_REPO_TOKEN_ENV"),
                                 ("research_repo_ssh_key_env", "SAGAN_REPO_SSH_KEY_ENV")):
            name = settings.get(setting)
            if name and os.environ.get(name) and not pod_secrets.reserved(name):
                env[pointer] = name
                secret_names.append(name)
    declared = [a for a in ((pod_spec.get("config") or {}).get("artifacts") or [])
                if isinstance(a, str) and not a.startswith(verify.REMOTE)]
    if declared:
        env["SAGAN_ARTIFACT_PATHS"] = "\n".join(declared)
    for secret_name in secret_names:
        if os.environ.get(secret_name):
            env[secret_name] = os.environ[secret_name]  # injected at create, never stored
    if secret_names:
        env["SAGAN_SECRET_NAMES"] = ",".join(secret_names)  # names only: the log upload blanks their values
    return env


# RunPod publishes no limit for `args`; Docker's practical limit is a few kB, and the bootstrap
# alone is larger. So the script travels base64-encoded in an env var (RunPod allows up to 50
# env vars per pod, "Environment variables" in its docs) and `args` stays one short line.
MAX_ARGS_CHARS = 2000
MAX_POD_ENV = 50
BOOTSTRAP_ENV = "SAGAN_BOOTSTRAP_B64"
RUNPOD_ARGS = (f"bash -c 'printf %s \"${BOOTSTRAP_ENV}\" | base64 -d > /tmp/sagan_bootstrap.sh && "
               "exec bash /tmp/sagan_bootstrap.sh'")


def _container_command(docker_args: str, *, local: bool) -> tuple[str, dict[str, str]]:
    """(args, extra env): local pods run the wrapper from disk; RunPod pods get it in an env var
    (the image does not have it) and the spec's command in SAGAN_DOCKER_ARGS."""
    if local:
        return docker_args, {}
    return RUNPOD_ARGS, {BOOTSTRAP_ENV: base64.b64encode(BOOTSTRAP.read_bytes()).decode(),
                         "SAGAN_DOCKER_ARGS": docker_args}


def _check_request_size(request: PodRequest) -> None:
    """Refuse, before any create call, a request RunPod would refuse for its size."""
    if len(request.args) > MAX_ARGS_CHARS:
        raise BackendError("spec_invalid", f"The container command is {len(request.args)} characters; "
                                           f"at most {MAX_ARGS_CHARS} are sent as `args`.")
    if len(request.env) > MAX_POD_ENV:
        raise BackendError("spec_invalid", f"The pod would get {len(request.env)} environment variables; "
                                           f"RunPod allows {MAX_POD_ENV}. Drop some of the spec's env or secrets.")


def run_dispatch(run_id) -> str:
    """The saga for one dispatch run (a job on the dispatch queue; `local` for pods on this host).

    The run is claimed with a compare-and-set (two jobs for one run: one proceeds) and
    heartbeats while the saga runs, like an agent run, so the reconciler can tell a saga
    that is waiting out a slow provider from one whose worker died (`recover_lost`).
    """
    run_uuid = uuid.UUID(str(run_id))
    if not runs.claim(run_uuid, ("queued",), "running"):
        db.session.rollback()
        return "skipped"
    db.session.commit()
    run = db.session.get(AgentRun, run_uuid)
    experiment = db.session.get(Experiment, run.scope_id)
    app = current_app._get_current_object()
    with Heartbeat(app, run.id, app.config["HEARTBEAT_SECONDS"]):
        return _saga(run, experiment)


def _saga(run: AgentRun, experiment: Experiment) -> str:
    try:
        pods_spec = specs.as_pods(approved_spec(experiment))
    except Conflict as exc:
        return _fail(run, experiment, "spec_invalid", exc.message, created=[])
    # A resumed saga (its worker was lost) finds the pods it already made: it keeps them
    # and creates only the missing ones, so no pod is ever created twice.
    earlier = _pods_by_index(run.id)
    prices = costs.owner_gpu_prices()
    if not earlier:
        refused = _preflight(run, experiment, pods_spec, prices)
        if refused is not None:
            return refused
    # Nothing new while an earlier dispatch's pod may still bill (a failure's survivor).
    still_up = stop_earlier_pods(run, experiment)
    if still_up:
        return _fail(run, experiment, "provider_error", "Pods of an earlier dispatch may still be billing and "
                     "could not be stopped: " + ", ".join(p.name for p in still_up) + ". No new pod was "
                     "created; stop them, then dispatch again.", created=[])
    if not earlier:
        runs.append_event(run.id, "deploy_started", f"dispatching {len(pods_spec)} pod(s)")
    db.session.commit()
    created: list[Pod] = []
    for index, pod_spec in enumerate(pods_spec):
        attempts = earlier.get(index, [])
        pod = _adopt(run, attempts)
        failure = None
        if pod is None:
            pod, failure = _provision_one(run, experiment, index, pod_spec, prices,
                                          first_attempt=len(attempts) + 1)
        if pod is None:
            reason, message = failure
            if len(pods_spec) > 1:
                note = PARTIAL_NOTE.format(up=len(created), total=len(pods_spec))
                return _fail(run, experiment, "partial_dispatch", f"{note} Last error: {message}",
                             created=created, block_note=note)
            return _fail(run, experiment, reason, message, created=created)
        created.append(pod)
    runs.append_event(run.id, "deploy_completed", f"dispatched {len(created)}/{len(pods_spec)} pod(s)")
    run.status = "waiting"
    run.waiting_for = {"pods": str(run.id)}
    if experiment.status in ("implementing", "testing"):
        lifecycle.transition(experiment, "queued", Actor.system(),
                             note=f"{specs.pod_noun(created[0].account if created else None)} dispatched; "
                                  "waiting for runtime.",
                             metadata={"run_id": str(run.id), "pods": [p.name for p in created]})
    db.session.commit()
    return "dispatched"


def _preflight(run: AgentRun, experiment: Experiment, pods_spec: list[dict], prices: dict) -> str | None:
    """The preflight checks (services.dispatch.preflight), before any pod is created: recorded
    on the run and the timeline; a failure blocks the experiment with one line per failed
    check (the owner's turn) and fails the dispatch. None when it passed."""
    account = approved_terms(experiment).account
    db.session.commit()  # no transaction is held while the research repository is fetched
    report = preflight.run(experiment, pods_spec, account, prices, candidates)
    actor = Actor.system("preflight")
    metadata = {**report.as_json(), "run_id": str(run.id)}
    runs.append_event(run.id, "preflight", report.summary(), metadata)
    markers.post_marker(experiment, "epm:preflight", actor, note=report.summary()[:1900], metadata=metadata)
    if report.passed:
        db.session.commit()
        return None
    note = ("Preflight refused the dispatch; no pod was created. Fix these, then re-approve the plan to dispatch "
            "again: " + " ".join(f"({i}) {c.message}." for i, c in enumerate(report.failures, start=1)))[:1900]
    effects = []
    if not experiment.terminal and experiment.status != "blocked":
        effects = lifecycle.transition(experiment, "blocked", actor, note=note,
                                       metadata={"reason": "preflight_failed", "run_id": str(run.id),
                                                 "checks": metadata["checks"]})
    db.session.commit()
    lifecycle.run_side_effects(effects)
    return _fail(run, experiment, "preflight_failed", report.summary(), created=[], block_note=note)


def _pods_by_index(run_id) -> dict[int, list[Pod]]:
    """The run's Pod rows so far, by run index, oldest attempt first."""
    found: dict[int, list[Pod]] = {}
    for pod in db.session.scalars(sa.select(Pod).where(Pod.agent_run_id == run_id)
                                  .order_by(Pod.run_index, Pod.attempt)):
        found.setdefault(pod.run_index, []).append(pod)
    return found


def _adopt(run: AgentRun, attempts: list[Pod]) -> Pod | None:
    """The pod an earlier pass of this saga already made for this index, if any.

    A row with a provider id was created (its `deploy_pod_started` event was committed
    with it). A row still `deploying` without one was interrupted during its create call:
    the provider may have made it, so look it up by name after the listing lag, as after
    a 5xx; found, it is kept; not found, that attempt is marked failed.
    """
    for pod in attempts:
        if pod.provider_pod_id and pod.status in ("deploying", "running"):
            return pod
        if pod.provider_pod_id is None and pod.status == "deploying":
            lag = current_app.config["POD_LISTING_LAG_SECONDS"]
            waited = (utcnow() - pod.created_at).total_seconds() if pod.created_at else 0
            if waited < lag:
                sleep(lag - waited)
            try:
                found = backend_for(pod.account).list_by_name(pod.name)
            except BackendError:
                found = []
            if not found:
                pod.status = "failed"
                pod.last_error = "The worker stopped during the create call; the provider has no pod of this name."
                db.session.commit()
                continue
            _mark_created(run, pod, found[0], gpu=pod.gpu_type_id, found_after_restart=True)
            return pod
    return None


def recover_lost(run: AgentRun, stale_before) -> str | None:
    """The reconciler found this dispatch `running` with a stale heartbeat: its worker died.

    The first time, the saga resumes (the run goes back to `queued` and its job is queued
    again; `_adopt` keeps the pods it made). A saga lost a second time fails `worker_lost`,
    and its pods are stopped (all or nothing); a dispatch is never retried by recovery.
    Returns "resumed", "failed", or None when another reconciler got there first.
    """
    resumed = db.session.scalar(sa.select(sa.func.count()).select_from(RunEvent).where(
        RunEvent.run_id == run.id, RunEvent.event_type == "woken")) or 0
    since = run.heartbeat_at.isoformat() if run.heartbeat_at else "start"
    if resumed == 0:
        if not runs.claim(run.id, ("running",), "queued", stale_before=stale_before):
            db.session.rollback()
            return None
        runs.append_event(run.id, "woken", f"No heartbeat since {since}: the worker was lost mid-dispatch. "
                          "Resuming the saga; pods already created are kept and none is created twice.",
                          {"reason": "worker_lost"})
        db.session.commit()
        jobs.forget(dispatch_job_id(run.id))  # the dead worker's job still reads "started"
        enqueue_dispatch(run.id)
        return "resumed"
    if not runs.claim(run.id, ("running",), "failed", stale_before=stale_before):
        db.session.rollback()
        return None
    db.session.refresh(run)
    experiment = db.session.get(Experiment, run.scope_id)
    made = [p for p in db.session.scalars(sa.select(Pod).where(Pod.agent_run_id == run.id)) if p.provider_pod_id]
    _fail(run, experiment, "worker_lost", f"No heartbeat since {since}; the dispatch's worker was lost "
          "again after resuming once.", created=made)
    return "failed"


@dataclass(frozen=True)
class CreateRule:
    """One row of the table a refused create follows: what happens next, and its words for the timeline.

    `then`: "next" — try the next candidate; "account" — skip every other candidate on this
    account; "stop" — no candidate can succeed, the pod fails now; "retry" — the pod may
    exist: look it up by name after the listing lag, else try the same candidate again."""

    name: str
    then: str
    words: str


# RunPod's table of create failures ("Create a pod", API reference v2, read 2026-12-02;
# docs/pods.md), plus the refusals of Sagan's own checks and of the other backends.
CREATE_RULES = {rule.name: rule for rule in (
    CreateRule("no_balance", "account", "insufficient balance (402): no other candidate on this account can succeed"),
    CreateRule("no_pool_access", "next", "this account cannot use that pool (403): skip the candidate, keep going"),
    CreateRule("contract", "stop", "the request breaks RunPod's contract (422): never retried — every candidate "
                                   "sends the same body"),
    CreateRule("capacity", "next", "no capacity for this candidate: try the next"),
    CreateRule("refused", "next", "refused for this candidate (400): try the next"),
    CreateRule("may_exist", "retry", "transient failure (5xx or no answer): the pod may exist, so it is looked up "
                                     "by name before the same candidate is tried again"),
    CreateRule("credentials", "stop", "the asked account's credentials were refused: another candidate will not "
                                      "fix them"),
    CreateRule("other_credentials", "account", "this account's credentials were refused: its other candidates "
                                               "are skipped"),
    CreateRule("rate_limited", "stop", "rate limited for longer than Sagan waits (429)"),
    CreateRule("other", "next", "an answer RunPod's table does not list: try the next candidate"),
)}
# After a 5xx (or no answer) and no pod found by name, the same candidate is tried again,
# up to this many creates in all; then the upstream is taken as unhealthy and the list stops.
CREATE_TRIES = 3


def create_rule(error: BackendError, *, asked_account: bool) -> CreateRule:
    """The row of the create table this refusal falls under."""
    if error.reason == "provider_balance":
        return CREATE_RULES["no_balance"]
    if error.reason == "provider_capacity":
        return CREATE_RULES["capacity"]
    if error.reason == "provider_auth":
        if error.status == 403:
            return CREATE_RULES["no_pool_access"]
        return CREATE_RULES["credentials" if asked_account else "other_credentials"]
    if error.reason == "spec_invalid":
        return CREATE_RULES["contract" if error.status == 422 else "refused"]
    if error.status == 429:
        return CREATE_RULES["rate_limited"]
    if pod_may_exist(error):
        return CREATE_RULES["may_exist"]
    return CREATE_RULES["other"]


def pod_may_exist(error: BackendError) -> bool:
    """A failure after which the provider may have made the pod anyway (5xx, no answer)."""
    return error.reason == "provider_error" and (error.status is None or error.status >= 500)


def _provision_one(run: AgentRun, experiment: Experiment, index: int, pod_spec: dict, prices: dict,
                   *, first_attempt: int = 1):
    """Try the pod's candidates in order, following the create table after each refusal;
    returns (Pod, None) or (None, (reason, message))."""
    # The approved account, not the experiment's current one (launch refused a change, but
    # the saga runs later).
    options = candidates(pod_spec, approved_terms(experiment).account, prices)
    wanted = options[0]
    last = ("provider_capacity", "no candidate was tried")
    refusals: list[BackendError] = []
    given_up: set[str] = set()  # accounts none of whose candidates can succeed
    attempt = first_attempt
    for candidate in options:
        if candidate.account in given_up:
            continue
        for tries in range(1, CREATE_TRIES + 1):
            if candidate != wanted and tries == 1:
                runs.append_event(run.id, "pod_substitution",
                                  f"asked {wanted.describe()}, trying {candidate.describe()}: {last[1]}"[:2000],
                                  {"index": index, "asked": wanted.describe(), "used": candidate.describe(),
                                   "why": last[0]})
            pod, error = _create_once(run, experiment, index, pod_spec, candidate, attempt)
            attempt += 1
            if error is None:
                return pod, None
            rule = create_rule(error, asked_account=candidate.account == wanted.account)
            refusals.append(error)
            last = (error.reason, f"{rule.words}. {error.message}")
            then = rule.then
            if then == "retry" and tries == CREATE_TRIES:
                then = "stop"
                last = ("provider_error", f"RunPod failed {CREATE_TRIES} creates of {candidate.describe()} in a row "
                                          f"and none made a pod: its upstream looks unhealthy. {error.message}")
            runs.append_event(run.id, "pod_create_refused", f"{candidate.describe()}: {last[1]}"[:2000],
                              {"index": index, "candidate": candidate.describe(), "rule": rule.name,
                               "status": error.status, "then": then})
            if then == "stop":
                return None, last
            if then == "account":
                given_up.add(candidate.account)
            if then != "retry":
                break
    return None, _verdict(refusals, last)


def _create_once(run: AgentRun, experiment: Experiment, index: int, pod_spec: dict, candidate: Candidate,
                 attempt: int):
    """One create call for one candidate: the Pod row first, then the call; after a failure
    that may have made the pod anyway, the lookup by name. Returns (Pod, None) or (None, error)."""
    name = f"sagan-{experiment.number}-{run.id.hex[:8]}-{index}-{attempt}"
    token, token_hash = tokens.new_token()
    local = pod_accounts.on_this_host(candidate.account)
    pod = Pod(id=uuid.uuid4(), agent_run_id=run.id, experiment_id=experiment.id, run_index=index,
              attempt=attempt, account=candidate.account, name=name, gpu_type_id=candidate.gpu.provider_id,
              gpu_count=candidate.gpu_count, cloud_type=candidate.cloud, status="deploying",
              progress_token_hash=token_hash, cost_per_hr=None,
              metadata_={"keep_alive_minutes": pod_spec.get("keepAliveMinutes", 10),
                         "bootstrap_silence_minutes": pod_spec.get("bootstrapSilenceMinutes", 10),
                         "spec_name": pod_spec.get("name"),
                         # What the run is told apart by on charts: the code it ran and its settings.
                         "commit": _commit_of(experiment, pod_spec), "config": run_config.from_spec(pod_spec)})
    db.session.add(pod)
    db.session.commit()  # the row exists before the create call, whatever happens next
    backend = None  # this candidate's, never the previous one's
    try:
        backend = backend_for(candidate.account)
        args, wrapper_env = _container_command(pod_spec.get("dockerArgs") or "true", local=local)
        request = PodRequest(
            name=name, image=pod_spec.get("image") or current_app.config.get("SAGAN_POD_IMAGE") or DEFAULT_IMAGE,
            args=args, gpu_id=candidate.gpu.provider_id, gpu_count=candidate.gpu_count, cloud=candidate.cloud,
            disk_gb=candidate.disk_gb, volume_gb=candidate.volume_gb,
            env={**pod_env(experiment, run, pod_spec, index, name, token), **wrapper_env},
            host_urls=[url for url in [settings.get("research_repo_url") or ""] if url])
        if not local:
            _check_request_size(request)
        if pod_accounts.get(candidate.account).has_ssh:
            # The keys startSsh hands this pod are the account's now: the card says whether it has any.
            pod.metadata_ = {**pod.metadata_, "ssh_keys": ssh_keys.keys_on_account(backend)}
        made = backend.create(request)
    except BackendError as exc:
        made = None
        if pod_may_exist(exc) and backend is not None:
            # The provider may have created it anyway: wait out the listing lag, look it up.
            sleep(current_app.config["POD_LISTING_LAG_SECONDS"])
            try:
                found = backend.list_by_name(name)
            except BackendError:
                found = []
            made = found[0] if found else None
        if made is None:
            pod.status = "failed"
            pod.last_error = exc.message[:4000]
            db.session.commit()
            return None, exc
    _mark_created(run, pod, made, gpu=candidate.gpu.short)
    return pod, None


def _commit_of(experiment: Experiment, pod_spec: dict) -> str | None:
    """The commit a pod checks out, as pod_env tells it (None: the branch's head, unknown here)."""
    env = pod_spec.get("env") or {}
    return experiment.git_commit or env.get("SAGAN_GIT_COMMIT") or env.get("SAGAN_EPS_COMMIT_SHA") or None


def _verdict(refusals: list[BackendError], last: tuple[str, str]) -> tuple[str, str]:
    """Why no candidate worked. RunPod's own reading first: when every candidate was refused
    with a 400 and the last does not name capacity, the request is at fault (a rule the body
    breaks fails alike everywhere). Otherwise the spec is at fault only when every candidate
    was refused as invalid with the same words (GPU names aside); else the last error stands,
    and a list that ran out on capacity says so."""
    if refusals and all(r.status == 400 for r in refusals) and last[0] == "spec_invalid":
        return "spec_invalid", ("Every candidate was refused with a 400, which RunPod reads as a problem with the "
                                f"request rather than capacity: {refusals[-1].message}")
    if refusals and all(r.reason == "spec_invalid" for r in refusals):
        words = {_without_gpu_names(r.message) for r in refusals}
        if len(words) == 1:
            return "spec_invalid", f"Every candidate was refused alike: {refusals[-1].message}"
    if refusals and any(r.reason == "provider_capacity" for r in refusals) and last[0] == "spec_invalid":
        return "provider_capacity", last[1]
    return last


def _without_gpu_names(message: str) -> str:
    for gpu in specs.GPUS:
        message = message.replace(gpu.provider_id, "<gpu>")
    return message


def _mark_created(run: AgentRun, pod: Pod, made, *, gpu: str, **extra) -> None:
    """The provider has the pod (`made`): record its id, status and price, and say so on the run."""
    pod.provider_pod_id = made.id
    pod.status = "running" if made.status == "RUNNING" else "deploying"
    pod.cost_per_hr = made.cost_per_hr or None
    pod.last_started_at = utcnow()
    runs.append_event(run.id, "deploy_pod_started", str(pod.id),
                      {"pod": pod.name, "provider_pod_id": made.id, "gpu": gpu, "account": pod.account,
                       "cloud": pod.cloud_type, **extra})
    db.session.commit()


def stop_pod(pod: Pod, reason: str, *, actor: Actor | None = None) -> None:
    """Stop one pod, keeping its volume; record it on the run. Caller commits."""
    if pod.status in ("stopped", "terminated", "vanished", "failed"):
        return
    pod.status = "stop_requested"
    pod.desired_status = "stopped"
    pod.stop_reason = reason
    if pod.agent_run_id:
        runs.append_event(pod.agent_run_id, "pod_stop_requested", pod.name, {"pod_id": str(pod.id), "reason": reason})
    stop_at_provider(pod, f"{pod.name} stopped; volume kept.")


def stop_at_provider(pod: Pod, stopped_note: str, *, record_failure: bool = True) -> bool:
    """Ask the provider to stop a pod marked `stop_requested`; True once it is `stopped`.
    A refusal keeps it `stop_requested` with the provider's reason in `last_error` (the
    watcher asks again on its next pass, without a run event each time: record_failure).
    A pod on this host that this process may not stop is handed to the `local` queue's
    worker instead: it stays `stop_requested` (shown as stopping) until that job stops it.
    Caller commits."""
    if stops_elsewhere(pod):
        hand_to_local_worker(pod)
        return False
    try:
        if pod.provider_pod_id:
            backend_for(pod.account).stop(pod.provider_pod_id)
    except BackendError as exc:
        pod.last_error = exc.message[:4000]
        if pod.agent_run_id and record_failure:
            runs.append_event(pod.agent_run_id, "pod_stop_failed", exc.message, {"pod_id": str(pod.id)})
        return False
    pod.status = "stopped"
    pod.stopped_at = utcnow()
    if pod.agent_run_id:
        runs.append_event(pod.agent_run_id, "pod_stopped", stopped_note, {"pod_id": str(pod.id), "reason": pod.stop_reason})
    return True


def stops_elsewhere(pod: Pod) -> bool:
    """A pod on this host that this process may not stop: it is not root and the pod runs as
    the pod user (or local pods are off in this process). The scheduler may tick in a worker
    of the worker account, and the owner's Stop comes through the web: both hand such a stop
    to the `local` queue's worker, the one that started the pod."""
    if not pod.provider_pod_id or not pod_accounts.on_this_host(pod.account):
        return False
    try:
        return not backend_for(pod.account).stops_here(pod.provider_pod_id)
    except BackendError:
        return True


# Session.info key: pods whose stop is queued on `local` when the session commits.
LOCAL_STOPS_KEY = "sagan_local_pod_stops"


def local_stop_job_id(pod_id) -> str:
    return f"local-pod-{pod_id}"


def hand_to_local_worker(pod: Pod) -> None:
    """Queue the pod's settling (services.dispatch.watcher.settle_local_pod) on `local` once the
    caller's transaction commits: the job reads the row, which must say `stop_requested` by
    then. A fixed job id per pod, so a watcher pass asking again while it waits adds nothing;
    an enqueue lost with a rollback or a Redis blip is asked for again by the watcher's next
    pass (the pod is still `stop_requested`)."""
    session = db.session()
    pending = session.info.setdefault(LOCAL_STOPS_KEY, set())
    if not pending:
        sa.event.listen(session, "after_commit", _enqueue_local_stops, once=True)
    pending.add(str(pod.id))


def _enqueue_local_stops(session) -> None:
    for pod_id in sorted(session.info.pop(LOCAL_STOPS_KEY, ())):
        try:
            jobs.enqueue_unique(jobs.LOCAL, "workers.dispatch.settle_local_pod", pod_id,
                                job_id=local_stop_job_id(pod_id))
        except RedisError as exc:
            # The stop is committed (`stop_requested`); the watcher's next pass queues it again.
            log.warning("could not queue the stop of local pod %s: %s", pod_id, exc)


def _fail(run: AgentRun, experiment: Experiment, reason: str, message: str, *, created: list,
          block_note: str | None = None) -> str:
    """The saga could not finish: the pods it made are stopped and the dispatch fails."""
    runs.append_event(run.id, "deploy_failed", message[:4000], {"reason": reason})
    return fail_dispatch(run, reason, message, stop=created, block_note=block_note)


def fail_dispatch(run: AgentRun, reason: str, message: str, *, stop=(), block_note: str | None = None) -> str:
    """End a dispatch run as failed, from the saga or the watcher alike.

    Every pod the dispatch owns is stopped first (volumes kept), before recovery or a
    blocker is decided: survivors of a failure bill by the hour, and a recovery must not
    start new pods next to them. `stop` adds pods not (yet) linked to the run. The
    experiment's timeline says which pods were stopped. Then recovery decides (one
    recovery, or a blocker — a partial dispatch blocks with its exact `block_note` and is
    never recovered), the effects run, and the run waiting on this dispatch is woken."""
    stop_owned_pods(run, reason, extra=stop)
    outcome = recovery.fail(run, reason, message, block_note=block_note)
    db.session.commit()
    lifecycle.run_side_effects(outcome.effects)
    if run.parent_run_id:
        wake_parent_if_ready(run.parent_run_id)
    return "failed"


# Statuses of a pod that may still bill: up, coming up, its script finished but the
# container kept alive, or a stop that has not been confirmed yet.
BILLING_STATUSES = (*registry.POD_LIVE_STATUSES, "exited", "stop_requested")


def stop_owned_pods(run: AgentRun, reason: str, *, extra=()) -> tuple[list[Pod], list[Pod]]:
    """Stop every pod of the dispatch that may still bill; returns (stopped, not stopped). A pod
    handed to this host's local worker is in neither: it is being stopped, nobody needs to.

    Says so on the experiment's timeline, naming the pods, so the owner sees what was
    stopped and what still needs a hand."""
    owned = {p.id: p for p in db.session.scalars(sa.select(Pod).where(
        Pod.agent_run_id == run.id, Pod.status.in_(BILLING_STATUSES)))}
    owned.update({p.id: p for p in extra if p.status in BILLING_STATUSES})
    stopped, handed, failed = [], [], []
    for pod in sorted(owned.values(), key=lambda p: (p.run_index, p.attempt)):
        stop_pod(pod, "failure")
        if pod.status == "stopped":
            stopped.append(pod)
        else:
            (handed if stops_elsewhere(pod) else failed).append(pod)
    experiment = db.session.get(Experiment, run.scope_id) if run.scope_id else None
    if experiment is not None and (stopped or handed or failed):
        words = []
        if stopped:
            words.append("stopped " + ", ".join(p.name for p in stopped) + " (volumes kept)")
        if handed:
            words.append("stopping " + ", ".join(p.name for p in handed) + " on this host's local worker")
        if failed:
            words.append("could not stop " + ", ".join(p.name for p in failed) + " — stop them by hand")
        events.record(experiment, "note", Actor.system("pod watcher"),
                      note=f"Dispatch {run.short_id} failed ({reason}): " + "; ".join(words) + ".",
                      metadata={"reason": reason, "run_id": str(run.id),
                                "stopped_pods": [p.name for p in stopped],
                                "stopping_pods": [p.name for p in handed],
                                "unstopped_pods": [p.name for p in failed]})
    db.session.commit()
    return stopped, failed


def stop_earlier_pods(run: AgentRun, experiment: Experiment) -> list[Pod]:
    """Before a dispatch creates anything: stop the experiment's pods of earlier dispatches that
    may still bill (a recovery after a failure, a re-approved plan). Returns those still not
    stopped: while any is, no new pod is created."""
    earlier = list(db.session.scalars(sa.select(Pod).where(
        Pod.experiment_id == experiment.id, Pod.status.in_(BILLING_STATUSES),
        sa.or_(Pod.agent_run_id.is_(None), Pod.agent_run_id != run.id)).order_by(Pod.created_at, Pod.run_index)))
    for pod in earlier:
        stop_pod(pod, "failure")
    db.session.commit()
    # A pod on this host handed to the local worker is being stopped and bills nothing.
    return [p for p in earlier if p.status != "stopped" and not stops_elsewhere(p)]


# --- after-move hooks (services/pipeline/side_effects.py) -----------------------------------------

def on_stop_active_work(experiment_id, actor, metadata):
    """Archiving or cancelling an experiment cancels its active runs."""
    active = list(db.session.scalars(sa.select(AgentRun).where(
        AgentRun.scope_kind == "experiment", AgentRun.scope_id == experiment_id,
        AgentRun.status.in_(("queued", "running", "waiting", "awaiting_approval")))))
    for pod in db.session.scalars(sa.select(Pod).where(Pod.experiment_id == experiment_id,
                                                      Pod.status.in_(registry.POD_LIVE_STATUSES))):
        stop_pod(pod, "owner", actor=actor)
    for run in active:
        if run.status == "running":
            runs.request_cancel(run)
            runs.append_event(run.id, "cancelled", "The experiment was closed; stopping after this step.")
        else:
            runs.set_status(run, "cancelled", reason="cancelled_by_owner", error="The experiment was closed.")
            runs.append_event(run.id, "cancelled", "The experiment was closed.")
    db.session.commit()


def on_enqueue_dispatch(experiment_id, actor, metadata):
    enqueue_dispatch(metadata["run_id"])


def on_stop_run_pods(experiment_id, actor, metadata):
    """A cancelled run's pods are stopped with their volumes kept."""
    run_id = uuid.UUID(metadata["run_id"])
    owned = [run_id] + [c.id for c in db.session.scalars(sa.select(AgentRun).where(AgentRun.parent_run_id == run_id))]
    for pod in db.session.scalars(sa.select(Pod).where(Pod.agent_run_id.in_(owned),
                                                      Pod.status.in_(registry.POD_LIVE_STATUSES))):
        stop_pod(pod, "owner", actor=actor)
    for dispatch in db.session.scalars(sa.select(AgentRun).where(AgentRun.id.in_(owned), AgentRun.kind == "experiment",
                                                                AgentRun.status.in_(registry.RUN_ACTIVE_STATUSES))):
        runs.set_status(dispatch, "cancelled", reason="cancelled_by_owner", error="Run cancelled by owner")
    db.session.commit()
