"""Watching pods (SPEC §6.7): a scheduled pass polls every active pod, and each progress
post gets an immediate look. The watcher may only move an experiment `queued → running`
and raise pod failures (lesson: the old watcher forced `running` on every poll).
"""
from __future__ import annotations

import logging
import uuid
from datetime import datetime, timedelta
from typing import NamedTuple

import sqlalchemy as sa
from flask import current_app
from redis.exceptions import RedisError

from models import AgentRun, Experiment, FleetIncident, Pod, PodProgressPost, db
from services.core import events, pod_accounts, redis_store, registry, settings
from services.core.actors import Actor
from services.core.clock import utcnow
from services.core.errors import Conflict
from services.dispatch import recovery, spend, verify
from services.dispatch.backends import BackendError, backend_for
from services.dispatch.pods import pods_of
from services.dispatch.provisioner import (
    PARTIAL_NOTE,
    fail_dispatch,
    hand_to_local_worker,
    stop_at_provider,
    stop_pod,
    stops_elsewhere,
)
from services.dispatch.spec import pod_noun
from services.workflow import jobs, lifecycle, runs
from services.workflow.parking import wake_parent_if_ready

log = logging.getLogger(__name__)
SYSTEM = Actor.system("pod watcher")
# Pods the watcher asks the provider about: the live ones, and exited ones not yet settled.
WATCHED_POD_STATUSES = ("deploying", "running", "retrying", "stop_requested", "exited")
VANISH_CHECKS = 3
VANISH_SPAN = timedelta(minutes=2)
FLEET_WINDOW = timedelta(minutes=5)
SETUP_FAILED = "setup failed:"
CRASH_LOOP_POSTS = 3
CRASH_LOOP_WINDOW = timedelta(minutes=10)
PROVIDER_TO_POD = {"PROVISIONING": "deploying", "STARTING": "deploying", "RUNNING": "running",
                   "EXITED": "exited", "ERROR": "exited", "TERMINATED": "terminated"}


# --- the periodic pass ---------------------------------------------------------------------------

WATCH_GATE_KEY = "sagan:watcher:last-pass"


def watch_now_and_then() -> dict | None:
    """The scheduler's entry: one pass every SAGAN_POD_WATCH_SECONDS, however often it ticks.

    A Redis key with that expiry is the gate, so several schedulers (or a fast tick) never
    poll the provider more often than configured. Progress posts still get an immediate look
    (`after_progress`), so a long period delays only what polling alone can see."""
    period_ms = max(int(current_app.config["POD_WATCH_SECONDS"] * 1000), 1000)
    if not redis_store.connection().set(WATCH_GATE_KEY, "1", nx=True, px=period_ms):
        return None
    return watch()


def watch(limit: int = 100) -> dict:
    """Poll a batch of active pods (least recently checked first) and react; then enforce caps
    and terminate stopped pods past their retention."""
    now = utcnow()
    pods = list(db.session.scalars(sa.select(Pod).where(Pod.status.in_(WATCHED_POD_STATUSES), Pod.provider_pod_id.is_not(None))
                                   .order_by(Pod.last_checked_at.asc().nulls_first()).limit(limit)))
    seen = {"checked": 0, "vanished": 0}
    listings = _AccountListings()
    for pod in pods:
        try:
            _check(pod, now, listings)
            seen["checked"] += 1
        except BackendError as exc:
            pod.last_error = exc.message[:4000]
            pod.last_checked_at = now
        db.session.commit()
    for run_id in {p.agent_run_id for p in pods if p.agent_run_id}:
        try:
            _review_dispatch(run_id, now)
        except Conflict as exc:
            # Another writer moved this experiment first (an owner's board move, a progress
            # post): this run is looked at again on the next pass; the other runs still are now.
            db.session.rollback()
            log.info("watcher: dispatch %s changed under this pass (%s); next pass", run_id, exc.message)
        db.session.commit()
    _enforce_caps(now)
    db.session.commit()
    terminate_expired(now)
    db.session.commit()
    return seen


class _AccountListings:
    """One whole-account listing per account and pass, taken only when a pod is missing.

    A pod that answers 404 is a vanish unless the account's listing comes back empty while
    Sagan knows other pods there: a key in the wrong team scope (or an outage) silently lists
    nothing and answers 404 for every pod, which is no evidence that every pod vanished."""

    def __init__(self):
        self._listed: dict[str, int] = {}
        self._known: dict[str, int] = {}

    def looks_unscoped(self, account: str) -> bool:
        """The account lists no pod at all, while Sagan knows two or more of its pods exist."""
        if account not in self._known:
            self._known[account] = db.session.scalar(sa.select(sa.func.count(Pod.id)).where(
                Pod.account == account, Pod.status.in_(WATCHED_POD_STATUSES), Pod.provider_pod_id.is_not(None))) or 0
        if self._known[account] < 2:
            return False  # the one pod we know is missing: that is what a vanish looks like
        if account not in self._listed:
            self._listed[account] = len(backend_for(account).list_all(""))
        return self._listed[account] == 0


def _check(pod: Pod, now, listings: _AccountListings) -> None:
    found = backend_for(pod.account).get(pod.provider_pod_id)
    # While the provider answered, a progress post may have stopped this pod (a crash loop)
    # or reported its exit: decide from the row as it is now, locked until the pass commits,
    # or the answer would overwrite that `stopped` with the `exited` the stop itself caused.
    # The lock is taken after the call so that no row stays locked across the network.
    db.session.refresh(pod, with_for_update=True)
    pod.last_checked_at = now
    if pod.status not in WATCHED_POD_STATUSES:
        return  # stopped (or ended) meanwhile: what the provider said before is no news
    if found is None:
        return _missing(pod, now, listings)
    meta = dict(pod.metadata_ or {})
    if meta.get("missing_checks"):
        meta.pop("missing_checks")  # it came back: a listing blip, not a vanish
        pod.metadata_ = meta
    seen = status_seen(pod.status, found.status, exit_reported=pod.exit_code is not None)
    changed = (seen != pod.status or float(found.cost_per_hr or 0) != float(pod.cost_per_hr or 0))
    pod.status = status_settled(pod.status, seen)
    # A stop that the provider finished on its own time, or a pod it terminated, ends here:
    # without stopped_at a stopped pod's volume was never terminated (retention_ends).
    if pod.status == "stopped":
        pod.stopped_at = pod.stopped_at or now
    elif pod.status == "terminated":
        pod.terminated_at = pod.terminated_at or now
    copy_provider_facts(pod, found, now)
    if changed and pod.agent_run_id:
        runs.append_event(pod.agent_run_id, "pod_status", found.status,
                          {"pod_id": str(pod.id), "status": pod.status, "cost_per_hr": found.cost_per_hr,
                           "uptime": found.uptime_seconds})
    if pod.status == "stop_requested":
        _retry_stop(pod)
    elif keep_alive_over(pod, now):
        # The bootstrap waits after its script instead of exiting (an exited container is
        # restarted on RunPod): ending keep-alive is ours to do.
        stop_pod(pod, "completed")


def _retry_stop(pod: Pod) -> None:
    """A stop the provider refused (its retries spent) and the pod still up: asked again
    on every pass until it holds. Nothing else would stop it — a failed dispatch's
    experiment is blocked, and no new saga may come to clear its leftovers — and it bills
    by the hour meanwhile."""
    if not stop_at_provider(pod, f"{pod.name} stopped on a later try; volume kept.", record_failure=False):
        return
    experiment = db.session.get(Experiment, pod.experiment_id)
    if experiment is not None:
        events.record(experiment, "note", SYSTEM,
                      note=f"{pod.name} is stopped now (volume kept): the provider refused the first stop.",
                      metadata={"pod": pod.name, "reason": pod.stop_reason})


def _missing(pod: Pod, now, listings: _AccountListings) -> None:
    """The provider does not know the pod: a stop we asked for is done; otherwise it counts
    towards a vanish, declared after VANISH_CHECKS misses over VANISH_SPAN (or, if the whole
    account lists nothing, a fleet incident instead)."""
    if pod.status == "stop_requested":
        pod.status = "stopped"
        pod.stopped_at = pod.stopped_at or now
        return
    meta = dict(pod.metadata_ or {})
    checks = meta.get("missing_checks", []) + [now.isoformat()]
    meta["missing_checks"] = checks
    pod.metadata_ = meta
    if not vanish_proven(checks, now):
        return
    if not pod_accounts.on_this_host(pod.account) and listings.looks_unscoped(pod.account):
        return _empty_listing_incident(pod, now)
    _vanished(pod, now)


def vanish_proven(missing_checks: list[str], now) -> bool:
    """Enough misses (ISO times, oldest first) spread over long enough to call the pod gone."""
    first = datetime.fromisoformat(missing_checks[0])
    return len(missing_checks) >= VANISH_CHECKS and now - first >= VANISH_SPAN


def status_seen(current: str, provider_status: str, *, exit_reported: bool) -> str:
    """Sagan's pod status for the provider's answer (an unknown answer changes nothing)."""
    seen = PROVIDER_TO_POD.get(provider_status, current)
    if exit_reported and seen in ("running", "deploying") and current != "stop_requested":
        # The script reported its exit and the container waits for us to stop it (keep-alive):
        # RunPod still says RUNNING, the pod is `exited` for Sagan. Not for a stop we asked
        # for: the container still up is that stop not done yet (it was taken as done).
        return "exited"
    return seen


def status_settled(current: str, seen: str) -> str:
    """The status stored: `stopped` stays; a stop we asked for stays requested until it
    ends in `stopped` (not `exited`)."""
    if current == "stopped":
        return current
    if current == "stop_requested":
        # A stop we asked for ends in `stopped`; while the provider still has the pod up,
        # the stop is still owed (the watcher asks again), not forgotten as `running`.
        return "stopped" if seen in ("exited", "terminated") else current
    return seen


def copy_provider_facts(pod: Pod, found, now) -> None:
    """Price, uptime, SSH address and the exit the provider reports (never lost once known)."""
    pod.cost_per_hr = found.cost_per_hr if found.cost_per_hr else pod.cost_per_hr
    pod.uptime_seconds = max(pod.uptime_seconds or 0, found.uptime_seconds or 0)
    if found.ssh_host:  # host, port and user belong together (the direct port changes on a restart)
        pod.ssh_host, pod.ssh_port, pod.ssh_user = found.ssh_host, found.ssh_port, found.ssh_user
    if found.exit_code is not None and pod.exit_code is None:
        pod.exit_code, pod.exited_at = found.exit_code, now
    if found.status == "ERROR" and pod.exit_code is None:
        pod.exit_code, pod.exited_at = 1, now


def keep_alive_over(pod: Pod, now) -> bool:
    """A pod that exited 0 has waited its keep-alive minutes (10 unless the spec says)."""
    if not (pod.status == "exited" and pod.exit_code == 0 and pod.exited_at):
        return False
    keep = timedelta(minutes=(pod.metadata_ or {}).get("keep_alive_minutes", 10))
    return now >= pod.exited_at + keep


def _empty_listing_incident(pod: Pod, now) -> None:
    """The account lists no pods at all while this one (and maybe others) should exist: open a
    fleet incident naming the account; declare nothing vanished and recover nothing."""
    meta = dict(pod.metadata_ or {})
    meta.pop("missing_checks", None)  # start counting again once the listing is back
    pod.metadata_ = meta
    pod.last_error = (f"{pod.account}: the provider answered 404 for this pod and listed no pods at all for "
                      "the account; not declared vanished (a key in the wrong scope or an outage).")
    if recovery.fleet_incident_open():
        return
    db.session.add(FleetIncident(id=uuid.uuid4(), opened_at=now, pods=[
        {"pod": pod.name, "experiment_id": str(pod.experiment_id), "account": pod.account,
         "reason": "empty_listing", "note": pod.last_error}]))
    if pod.agent_run_id:
        runs.append_event(pod.agent_run_id, "fleet_incident", pod.last_error, {"pod_id": str(pod.id)})
    log.warning("fleet incident opened: %s lists no pods while %s should exist", pod.account, pod.name)


# --- retention -----------------------------------------------------------------------------------

RETENTION_WARNING = timedelta(days=1)


def retention_ends(pod: Pod):
    """When a stopped pod (and its volume) will be terminated, or None if it is not waiting for that."""
    if pod.status != "stopped" or pod.stopped_at is None:
        return None
    return pod.stopped_at + timedelta(days=current_app.config["POD_RETENTION_DAYS"])


def retention_warning(pod: Pod) -> str | None:
    """The pod card's warning, from a day before the pod is terminated."""
    ends = retention_ends(pod)
    if ends is None or utcnow() < ends - RETENTION_WARNING:
        return None
    return (f"Its volume is terminated at {ends:%Y-%m-%d %H:%M} UTC (SAGAN_POD_RETENTION_DAYS="
            f"{current_app.config['POD_RETENTION_DAYS']}); copy anything you need before then.")


def terminate_expired(now, limit: int = 20) -> list[str]:
    """Terminate stopped pods past SAGAN_POD_RETENTION_DAYS: a stopped pod's volume bills until then."""
    cutoff = now - timedelta(days=current_app.config["POD_RETENTION_DAYS"])
    expired = list(db.session.scalars(sa.select(Pod).where(
        Pod.status == "stopped", Pod.stopped_at <= cutoff, Pod.provider_pod_id.is_not(None))
        .order_by(Pod.stopped_at).limit(limit)))
    if not expired:
        return []
    experiments_by = {e.id: e for e in db.session.scalars(sa.select(Experiment).where(
        Experiment.id.in_({p.experiment_id for p in expired})))}
    done = []
    for pod in expired:
        if stops_elsewhere(pod):
            hand_to_local_worker(pod)  # its folder is root's: the local worker removes it
            continue
        if _terminate(pod, now, experiments_by.get(pod.experiment_id)):
            done.append(pod.name)
    return done


def _terminate(pod: Pod, now, experiment: Experiment | None) -> bool:
    """Terminate one stopped pod past retention, saying so; False when the provider refused."""
    try:
        backend_for(pod.account).terminate(pod.provider_pod_id)
    except BackendError as exc:
        pod.last_error = exc.message[:4000]
        return False
    pod.status, pod.terminated_at = "terminated", now
    days = current_app.config["POD_RETENTION_DAYS"]
    note = f"{pod.name} terminated after {days} day(s) stopped (SAGAN_POD_RETENTION_DAYS); its volume is gone."
    if pod.agent_run_id:
        runs.append_event(pod.agent_run_id, "pod_terminated", note, {"pod_id": str(pod.id)})
    if experiment is not None:
        events.record(experiment, "note", SYSTEM, note=note, metadata={"pod_id": str(pod.id), "reason": "retention"})
    return True


def _vanished(pod: Pod, now) -> None:
    pod.status = "vanished"
    pod.stopped_at = now
    if pod.agent_run_id:
        runs.append_event(pod.agent_run_id, "pod_vanished",
                          f"{pod.name} disappeared from {pod.account} after {VANISH_CHECKS} checks.",
                          {"pod_id": str(pod.id)})
    _maybe_open_fleet_incident(now)


def _maybe_open_fleet_incident(now) -> None:
    """Pods of two or more experiments vanishing within five minutes: pause automatic work."""
    window_start = now - FLEET_WINDOW
    recent = list(db.session.scalars(sa.select(Pod).where(Pod.status == "vanished", Pod.stopped_at >= window_start)))
    experiments_hit = {p.experiment_id for p in recent}
    if len(experiments_hit) < 2:
        return
    if recovery.fleet_incident_open():
        return
    db.session.add(FleetIncident(id=uuid.uuid4(), opened_at=now, pods=[
        {"pod": p.name, "experiment_id": str(p.experiment_id), "account": p.account,
         "vanished_at": p.stopped_at.isoformat()} for p in recent]))
    log.warning("fleet incident opened: %d pods of %d experiments vanished", len(recent), len(experiments_hit))


def open_incident() -> FleetIncident | None:
    return db.session.scalar(sa.select(FleetIncident).where(FleetIncident.resolved_at.is_(None)).limit(1))


def resolve_incident(incident: FleetIncident, actor: Actor) -> None:
    """One click from the banner: automatic dispatch and recovery resume."""
    incident.resolved_at = utcnow()
    incident.resolved_by = actor.id or actor.kind


# --- reacting to a dispatch's pods ----------------------------------------------------------------

class DispatchFailure(NamedTuple):
    """Why a dispatch fails: a registry reason, the message, and a note for the blocked card."""
    reason: str
    message: str
    block_note: str | None = None


def _review_dispatch(run_id, now) -> None:
    run = db.session.get(AgentRun, run_id)
    if run is None or run.terminal:
        return
    experiment = db.session.get(Experiment, run.scope_id)
    pods = pods_of(run.id)
    if not pods:
        return
    failure = vanished_failure(pods) or exit_failure(pods)
    if failure is None:
        _note_running(run, experiment, pods)
        deadline = timedelta(seconds=current_app.config["POD_START_DEADLINE_SECONDS"])
        failure = start_deadline_failure(pods, now, deadline) or bootstrap_silence_failure(pods, now)
    if failure is not None:
        return _fail_dispatch(run, experiment, failure.reason, failure.message, block_note=failure.block_note)
    if all(p.exit_code == 0 for p in pods):
        _dispatch_finished(run, experiment)


def vanished_failure(pods: list[Pod]) -> DispatchFailure | None:
    """Any vanished pod fails the dispatch, naming every one that vanished."""
    gone = [p.name for p in pods if p.status == "vanished"]
    return DispatchFailure("pod_vanished", "A pod vanished: " + ", ".join(gone)) if gone else None


def exit_failure(pods: list[Pod]) -> DispatchFailure | None:
    """The first pod that exited non-zero fails the dispatch."""
    pod = next((p for p in pods if p.exit_code not in (None, 0)), None)
    if pod is None:
        return None
    # The bootstrap says "setup failed: …" when the clone or the environment did not work:
    # its own reason, so the owner fixes the repository or its lock file, not the experiment.
    setup = (pod.progress_message or "").startswith(SETUP_FAILED)
    return DispatchFailure("setup_failed" if setup else "pod_exit_nonzero",
                           f"{pod.name} exited with code {pod.exit_code}. {pod.progress_message or ''}".strip())


def _note_running(run: AgentRun, experiment: Experiment, pods: list[Pod]) -> None:
    """A queued experiment is running once every pod runs or has exited."""
    # A pod that already exited did run: fast pods can finish between two polls.
    if experiment.status == "queued" and all(p.status == "running" or p.exit_code is not None for p in pods):
        lifecycle.transition(experiment, "running", SYSTEM, note=f"{pod_noun(pods[0].account)} is running.",
                             metadata={"run_id": str(run.id)})


def start_deadline_failure(pods: list[Pod], now, deadline: timedelta) -> DispatchFailure | None:
    """A pod still deploying past the start deadline: the dispatch failed, or with several pods
    it is partial (SPEC §6.4.3), never re-dispatched automatically."""
    if not any(p.status == "deploying" and p.created_at and now - p.created_at > deadline for p in pods):
        return None
    missed = f"Not every pod was running {deadline.seconds // 60} minutes after dispatch."
    if len(pods) == 1:
        return DispatchFailure("start_deadline", missed)
    note = PARTIAL_NOTE.format(up=sum(1 for p in pods if p.status == "running"), total=len(pods))
    return DispatchFailure("partial_dispatch", f"{note} Last error: {missed}", block_note=note)


def bootstrap_silence_failure(pods: list[Pod], now) -> DispatchFailure | None:
    """A running pod that has not posted progress within its bootstrap silence (10 minutes unless
    the spec says): its bootstrap may be stuck."""
    for pod in pods:
        silence = timedelta(minutes=(pod.metadata_ or {}).get("bootstrap_silence_minutes", 10))
        if pod.status == "running" and pod.last_progress_at is None and pod.last_started_at \
                and now - pod.last_started_at > silence:
            return DispatchFailure("bootstrap_silence",
                                   f"{pod.name} has been running for {silence.seconds // 60} minutes without a "
                                   "progress post; its bootstrap may be stuck.")
    return None


def _dispatch_finished(run: AgentRun, experiment: Experiment) -> None:
    """Every pod exited 0: the system collects and checks the uploads (SPEC §6.10), then
    wakes the orchestrator waiting on this dispatch, if there is one.

    The watcher and a pod's last progress post can both see the final exit at the same
    moment: the compare-and-set on the run lets exactly one of them finish the dispatch.
    The other finds it finished and leaves it (without this its moves failed as stale and
    aborted the rest of its watcher pass)."""
    if not runs.claim(run.id, registry.RUN_ACTIVE_STATUSES, "completed"):
        db.session.rollback()
        return
    runs.set_status(run, "completed")
    runs.append_event(run.id, "completed", f"All {len(pods_of(run.id))} pod(s) exited 0.")
    if experiment.status == "queued":
        lifecycle.transition(experiment, "running", SYSTEM, note=f"{pod_noun(experiment.pod_account)} is running.",
                             metadata={"run_id": str(run.id)})
    if experiment.status == "running":
        lifecycle.transition(experiment, "uploading", SYSTEM, note="All pods finished; collecting artifacts.")
        lifecycle.transition(experiment, "verifying", SYSTEM, note="Checking the uploaded artifacts.")
        verify.verify_uploads(experiment, run, SYSTEM)
    db.session.commit()
    if run.parent_run_id:
        wake_parent_if_ready(run.parent_run_id)


def _fail_dispatch(run: AgentRun, experiment: Experiment, reason: str, message: str, *,
                   block_note: str | None = None) -> None:
    """Every pod of the dispatch is stopped first (provisioner.fail_dispatch), whatever failed."""
    fail_dispatch(run, reason, message, block_note=block_note)


# --- immediate reactions to a progress post -------------------------------------------------------

def after_progress(pod_id, post) -> None:
    """A post arrived: a non-zero exit wakes the orchestrator now; repeated bootstraps are a crash loop."""
    if not post.is_bootstrap and post.exit_code is None:
        return  # the common case: an ordinary progress post needs no reaction (keeps ingest cheap)
    pod = db.session.get(Pod, pod_id)
    if pod is None or pod.agent_run_id is None:
        return
    run = db.session.get(AgentRun, pod.agent_run_id)
    if run is None or run.terminal:
        return
    experiment = db.session.get(Experiment, run.scope_id)
    now = utcnow()
    if post.is_bootstrap:
        recent = db.session.scalar(sa.select(sa.func.count(PodProgressPost.id)).where(
            PodProgressPost.pod_id == pod.id, PodProgressPost.created_at >= now - CRASH_LOOP_WINDOW,
            sa.or_(PodProgressPost.milestone == "bootstrap", PodProgressPost.message.ilike("%bootstrap complete%"))))
        if recent >= CRASH_LOOP_POSTS:
            tail = _last_stderr(pod)
            _fail_dispatch(run, experiment, "crash_loop",
                           f"{pod.name} restarted {recent} times in 10 minutes (crash loop). Last stderr: {tail}",
                           block_note=f"Crash loop: {pod.name} restarted {recent} times in 10 minutes; pods stopped. "
                                      f"Last stderr: {tail}"[:1900])
            return
    if post.exit_code is not None:
        if pod.status in ("running", "deploying"):
            pod.status = "exited"
        db.session.commit()
        _review_dispatch(run.id, now)
        db.session.commit()


def _last_stderr(pod: Pod) -> str:
    message = db.session.scalar(sa.select(PodProgressPost.message).where(
        PodProgressPost.pod_id == pod.id, PodProgressPost.message.ilike("%err:%"))
        .order_by(PodProgressPost.created_at.desc()).limit(1)) or pod.progress_message or ""
    return message.split("err:", 1)[-1].strip()[:1200] or "(no stderr reported)"


# --- caps and orphans -----------------------------------------------------------------------------

def _enforce_caps(now) -> None:
    """Experiment caps (default 1.5 × estimate) and the optional daily cap stop pods (SPEC §6.8)."""
    live = list(db.session.scalars(sa.select(Pod).where(Pod.status.in_(registry.POD_LIVE_STATUSES))))
    by_experiment: dict = {}
    for pod in live:
        by_experiment.setdefault(pod.experiment_id, []).append(pod)
    daily = settings.get("daily_cap_usd")
    over_daily = bool(daily) and spend.spend_today() >= float(daily)
    # Two queries for every experiment with live pods together, not two per experiment.
    spent_by = spend.spend_by_experiment(by_experiment)
    for experiment_id, stand_in in spend.unpriced_spend_by_experiment(by_experiment).items():
        spent_by[experiment_id] = spent_by.get(experiment_id, 0.0) + stand_in  # unknown is not $0
    experiments_by = {e.id: e for e in db.session.scalars(sa.select(Experiment).where(
        Experiment.id.in_(list(by_experiment))))} if by_experiment else {}
    for experiment_id, pods in by_experiment.items():
        experiment = experiments_by[experiment_id]
        spent = spent_by.get(experiment_id, 0.0)
        cap = experiment.cost_cap_usd
        if (cap is not None and spent >= cap) or over_daily:
            for pod in pods:
                stop_pod(pod, "cost_cap")
            figures = (f"spent ${spent:.2f} of the ${cap:.2f} cap" if cap is not None and spent >= cap
                       else f"today's spend reached the daily cap of ${float(daily):.2f}")
            if not experiment.terminal and experiment.status != "blocked":
                effects = lifecycle.transition(experiment, "blocked", SYSTEM,
                                               note=f"Cost cap reached: {figures}; pods stopped (volumes kept).",
                                               metadata={"reason": "cost_cap", "spent_usd": round(spent, 2),
                                                         "cap_usd": cap})
                db.session.commit()
                lifecycle.run_side_effects(effects)


LOCAL_SWEEP_JOB_ID = "local-orphan-sweep"


def orphan_sweep(accounts=None, *, hand_off: bool = True) -> list[str]:
    """Stop `sagan-*` pods the database does not know, or whose row is finished (stop_reason orphan).

    A process that may not list this host's pods (the scheduler in a worker of the worker
    account) queues the sweep of those accounts on `local` instead (`hand_off`; that job
    sweeps with hand_off=False)."""
    stopped = []
    for account in pod_accounts.names() if accounts is None else accounts:
        try:
            backend = backend_for(account)
            listed = backend.list_all("sagan-")
        except BackendError as exc:
            if hand_off and exc.status == 403 and pod_accounts.on_this_host(account):
                hand_local_sweep()
            continue  # an account without a key, or local pods off
        live = [p for p in listed if p.status not in ("EXITED", "TERMINATED")]
        # The rows of every listed pod in one query (by provider id, or by name for a pod whose
        # create call never answered), not one query per listed pod.
        known = list(db.session.scalars(sa.select(Pod).where(sa.or_(
            Pod.provider_pod_id.in_([p.id for p in live]), Pod.name.in_([p.name for p in live]))))) if live else []
        by_id = {r.provider_pod_id: r for r in known if r.provider_pod_id}
        by_name = {r.name: r for r in known}
        for provider_pod in live:
            row = by_id.get(provider_pod.id) or by_name.get(provider_pod.name)
            if row is not None and row.status in ("deploying", "running", "retrying", "exited", "stop_requested"):
                continue
            if pod_accounts.on_this_host(account) and not backend.stops_here(provider_pod.id):
                # Started by the local worker as the pod user: that worker stops it. A pod no
                # row knows has no job to name it; a scheduler running as root sweeps it.
                if row is not None:
                    hand_to_local_worker(row)
                else:
                    log.warning("orphan %s on %s runs as the pod user and no row names it: only a scheduler "
                                "running as root can stop it", provider_pod.name, account)
                continue
            try:
                backend.stop(provider_pod.id)
            except BackendError as exc:
                log.warning("orphan %s could not be stopped: %s", provider_pod.name, exc)
                continue
            if row is not None:
                row.stop_reason = "orphan"
            stopped.append(provider_pod.name)
            log.warning("stopped orphan pod %s on %s", provider_pod.name, account)
    db.session.commit()
    return stopped


def hand_local_sweep() -> None:
    """Queue the orphan sweep of this host's accounts on `local`, once at a time."""
    try:
        jobs.enqueue_unique(jobs.LOCAL, "workers.dispatch.sweep_local_orphans", job_id=LOCAL_SWEEP_JOB_ID)
    except RedisError as exc:
        log.warning("could not queue the sweep of local orphan pods: %s (the next sweep asks again)", exc)


def sweep_local_orphans() -> list[str]:
    """The `local` queue's orphan sweep of this host's accounts, for a scheduler that cannot list them."""
    return orphan_sweep([a for a in pod_accounts.names() if pod_accounts.on_this_host(a)], hand_off=False)


def settle_local_pod(pod_id) -> str:
    """The `local` queue's job for a pod on this host that another process could not stop
    (provisioner.stops_elsewhere): do what its row asks, as the worker that started it.
    `stop_requested` → stopped; stopped past retention → terminated; a finished row whose
    process still runs (an orphan) → stopped. Anything else is nothing to do, so the job run
    twice, or after the watcher's own pass got there first, is harmless."""
    pod = db.session.get(Pod, uuid.UUID(str(pod_id)), with_for_update=True)
    if pod is None or not pod.provider_pod_id or not pod_accounts.on_this_host(pod.account):
        db.session.rollback()
        return "nothing to do"
    if stops_elsewhere(pod):
        # This worker was meant to be the one that can: it is not root (a deployment mistake).
        pod.last_error = ("This host's local worker cannot stop the pod either: it must run as root, "
                          "with local pods on (docs/deploy.md, sagan-local-worker).")
        db.session.commit()
        return "cannot stop here"
    now = utcnow()
    outcome = "nothing to do"
    if pod.status == "stop_requested":
        stop_at_provider(pod, f"{pod.name} stopped by this host's local worker; volume kept.")
        outcome = pod.status
    elif pod.status == "stopped" and retention_ends(pod) is not None and retention_ends(pod) <= now:
        if _terminate(pod, now, db.session.get(Experiment, pod.experiment_id)):
            outcome = "terminated"
    elif pod.status not in WATCHED_POD_STATUSES:
        found = backend_for(pod.account).get(pod.provider_pod_id)
        if found is not None and found.status not in ("EXITED", "TERMINATED"):
            backend_for(pod.account).stop(pod.provider_pod_id)
            pod.stop_reason = pod.stop_reason or "orphan"
            log.warning("stopped orphan pod %s on %s", pod.name, pod.account)
            outcome = "orphan stopped"
    db.session.commit()
    return outcome


def stop_from_owner(pod: Pod, actor: Actor) -> list:
    """The owner's Stop button: the volume is kept and the experiment is blocked, never ended."""
    stop_pod(pod, "owner", actor=actor)
    experiment = db.session.get(Experiment, pod.experiment_id)
    if experiment is None or experiment.terminal or experiment.status == "blocked":
        return []
    return lifecycle.transition(experiment, "blocked", actor,
                                note=f"{pod_noun(pod.account)} stopped; volume preserved. Stopped by {actor.label or actor.kind}.",
                                metadata={"pod_id": str(pod.id), "stop_reason": "owner"})


def is_stale(pod: Pod) -> bool:
    """No heartbeat for the stale window: shown on the page, never a failure by itself."""
    if pod.status != "running" or pod.last_heartbeat_at is None:
        return False
    return utcnow() - pod.last_heartbeat_at > timedelta(seconds=current_app.config["POD_STALE_SECONDS"])
