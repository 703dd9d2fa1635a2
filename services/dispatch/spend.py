"""Actual spend: cost per hour × uptime, summed per pod, run and experiment (SPEC §6.8), and
what one stretch of time (a day of the daily log) cost, agents and GPU apart."""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from datetime import datetime

import sqlalchemy as sa

from models import AgentRun, Pod, db
from services.core import pod_accounts, records, registry
from services.core.clock import utcnow
from services.dispatch import costs
from services.dispatch import spec as specs

# What one pod has cost so far: the owner's adjusted rate if set, else the provider's, × uptime.
_POD_SPEND = sa.func.coalesce(Pod.adjusted_cost_per_hr, Pod.cost_per_hr, 0) * Pod.uptime_seconds / 3600.0


def experiment_spend(experiment_id) -> float:
    """USD spent by the experiment's pods so far (zero before any pod ran)."""
    total = db.session.scalar(
        sa.select(sa.func.coalesce(sa.func.sum(_POD_SPEND), 0)).where(Pod.experiment_id == experiment_id))
    return float(total or 0)


def spend_by_experiment(experiment_ids) -> dict:
    """Experiment id → USD spent by its pods, for many experiments in one query."""
    ids = list(experiment_ids)
    if not ids:
        return {}
    rows = db.session.execute(sa.select(Pod.experiment_id, sa.func.coalesce(sa.func.sum(_POD_SPEND), 0))
                              .where(records.among(Pod.experiment_id, ids)).group_by(Pod.experiment_id))
    return {experiment_id: float(total or 0) for experiment_id, total in rows}


def unpriced_spend_by_experiment(experiment_ids) -> dict:
    """Experiment id → USD of its billing pods whose price is unknown, counted at a stand-in rate.

    A pod whose provider reported no price (and the owner set none) is shown as "price
    unknown", but for a cap check unknown must never count as $0: it counts at the owner's
    or the catalogue's rate for its GPU, or, if that is unknown too, at the dearest rate
    known for any GPU. One query for all experiments."""
    ids = list(experiment_ids)
    if not ids:
        return {}
    prices = costs.owner_gpu_prices()
    dearest = max((p for p in prices.values() if p), default=0.0)
    rows = db.session.execute(sa.select(Pod.experiment_id, Pod.gpu_type_id, Pod.gpu_count, Pod.uptime_seconds).where(
        Pod.experiment_id.in_(ids), Pod.account.not_in(pod_accounts.free()), Pod.cost_per_hr.is_(None),
        Pod.adjusted_cost_per_hr.is_(None), Pod.uptime_seconds > 0))
    totals: dict = {}
    for experiment_id, gpu_id, count, uptime in rows:
        gpu = specs.find_gpu(gpu_id)
        rate = (prices.get(gpu.short) if gpu else None) or dearest
        totals[experiment_id] = totals.get(experiment_id, 0.0) + rate * max(count or 1, 1) * uptime / 3600.0
    return totals


def spend_today() -> float:
    """USD spent today (UTC) across all experiments, for the optional daily cap.

    Approximated from pods active today: cost per hour × uptime of pods started since midnight.
    """
    midnight = utcnow().replace(hour=0, minute=0, second=0, microsecond=0)
    total = db.session.scalar(
        sa.select(sa.func.coalesce(sa.func.sum(_POD_SPEND), 0)).where(Pod.last_started_at >= midnight))
    return float(total or 0)


def price_unknown(pod) -> bool:
    """A pod on an account that bills whose price nobody told us (the provider reported none,
    the owner set none): its spend is unknown, not $0. Local pods are free."""
    return pod_accounts.bills(pod.account) and pod.cost_per_hr is None and pod.adjusted_cost_per_hr is None


def pods_spend(pods) -> float:
    return sum(float(p.adjusted_cost_per_hr or p.cost_per_hr or 0) * (p.uptime_seconds or 0) / 3600.0 for p in pods)


def gpu_by_experiment(experiment_ids) -> dict:
    """Experiment id → (USD spent, USD per hour of the pods running now, pods that ran at an
    unknown rate, pods running now, of which at an unknown rate, pods in all, of which local),
    for many experiments in one query (the cost ledger).
    Local pods run on the Sagan host and bill nothing: they have no rate, and need none."""
    ids = list(experiment_ids)
    if not ids:
        return {}
    rate = sa.func.coalesce(Pod.adjusted_cost_per_hr, Pod.cost_per_hr)
    running = Pod.status == "running"
    unpriced = sa.and_(rate.is_(None), Pod.account.not_in(pod_accounts.free()))
    rows = db.session.execute(
        sa.select(Pod.experiment_id, sa.func.coalesce(sa.func.sum(_POD_SPEND), 0),
                  sa.func.coalesce(sa.func.sum(sa.case((running, rate), else_=0)), 0),
                  sa.func.count().filter(unpriced, sa.or_(running, Pod.uptime_seconds > 0)),
                  sa.func.count().filter(running), sa.func.count().filter(unpriced, running),
                  sa.func.count(), sa.func.count().filter(Pod.account.in_(pod_accounts.free())))
        .where(records.among(Pod.experiment_id, ids)).group_by(Pod.experiment_id))
    return {experiment_id: (float(spent), float(burn), int(unpriced_count), int(live), int(live_unpriced), int(pods),
                            int(local))
            for experiment_id, spent, burn, unpriced_count, live, live_unpriced, pods, local in rows}


@dataclass(frozen=True)
class WindowSpend:
    """What was spent between two instants: agents' tokens and GPU time apart, with how many
    runs and pods ran at a price nobody knows (their spend is a lower bound, never a false $0)."""
    agents_usd: float
    agent_runs: int
    agents_unpriced: int
    gpu_usd: float
    pods: int
    gpu_unpriced: int
    # Agent spend by the runs' classification (registry.RUN_CLASSIFICATIONS, "pending" being
    # unclassified): name → {"usd", "runs", "unpriced"}, as `agent_spend_by_classification`.
    agents_by_classification: dict = field(default_factory=dict)

    @property
    def total_usd(self) -> float:
        return self.agents_usd + self.gpu_usd


def spend_between(start: datetime, end: datetime, now: datetime | None = None) -> WindowSpend:
    """Spend in [start, end), in two queries whatever the number of runs and pods.

    An agent run's cost counts on the day it started (a run's tokens carry no timestamps of
    their own). A pod's counts for the part of its last stretch up (last start to its end, or
    now) inside the window, at its rate, never more than its recorded uptime: a pod up across
    midnight is split between the two days. Time up before a pod's last restart is not dated,
    so it is left out rather than put on the wrong day."""
    return spend_windows([start], end, now)[0]


def spend_windows(starts: list[datetime], end: datetime, now: datetime | None = None) -> list[WindowSpend]:
    """`spend_between(start, end)` for each of `starts` (today, this week, this month), in
    the same two queries as one window: the runs' sums filtered per window, the pods of the
    widest window read once and split in Python. The runs are grouped by classification, so
    each window's agent spend comes split by it too (registry.RUN_CLASSIFICATIONS; at most
    four rows), its total being the rows' sum."""
    now = now or utcnow()
    earliest = min(starts)
    agent_query, pods_query = _window_queries(len(starts))
    bounds = {"earliest": earliest, "end": end, **{f"start_{i}": start for i, start in enumerate(starts)}}
    agent_rows = db.session.execute(agent_query, bounds).all()
    pods = db.session.execute(pods_query, {"earliest": earliest, "end": end}).all()
    windows = []
    for index, start in enumerate(starts):
        gpu_usd, counted, unpriced = 0.0, 0, 0
        for up_since, ended_at, uptime, account, rate in pods:
            stop = min(ended_at or now, end, now)
            seconds = min((stop - max(up_since, start)).total_seconds(), float(uptime or 0))
            if seconds <= 0:
                continue
            counted += 1
            if rate is None:
                unpriced += int(pod_accounts.bills(account))
                continue
            gpu_usd += float(rate) * seconds / 3600.0
        spent, runs, runs_unpriced = 0.0, 0, 0
        by_classification = {name: _agent_split(0, 0, 0) for name in registry.RUN_CLASSIFICATIONS}
        for row in agent_rows:
            usd, count, count_unpriced = row[1 + 3 * index:4 + 3 * index]
            spent, runs, runs_unpriced = spent + float(usd or 0), runs + int(count), runs_unpriced + int(count_unpriced)
            by_classification[row[0]] = _agent_split(usd, count, count_unpriced)
        windows.append(WindowSpend(spent, runs, runs_unpriced, round(gpu_usd, 6), counted, unpriced,
                                   by_classification))
    return windows


@functools.cache
def _window_queries(windows: int) -> tuple[sa.Select, sa.Select]:
    """`spend_windows`' two statements for that many windows, the bounds bound when they run
    (`start_<i>`, `earliest`, `end`): built once (Today reads them on every render, and
    building them cost more than running them)."""
    def moment(name: str) -> sa.BindParameter:
        return sa.bindparam(name, type_=AgentRun.created_at.type)  # the UTC datetime type: SQLite too

    run_start = sa.func.coalesce(AgentRun.started_at, AgentRun.created_at)
    earliest, end = moment("earliest"), moment("end")
    columns = [AgentRun.classification]
    for index in range(windows):
        columns += _agent_sums(run_start >= moment(f"start_{index}"))
    agent_query = sa.select(*columns).where(run_start >= earliest, run_start < end).group_by(AgentRun.classification)
    pod_start = sa.func.coalesce(Pod.last_started_at, Pod.created_at)
    pods_query = sa.select(pod_start, Pod.ended_at, Pod.uptime_seconds, Pod.account,
                           sa.func.coalesce(Pod.adjusted_cost_per_hr, Pod.cost_per_hr)) \
        .where(pod_start < end, sa.or_(Pod.ended_at.is_(None), Pod.ended_at >= earliest),
               Pod.last_started_at.is_not(None))
    return agent_query, pods_query


def _agent_sums(*conditions) -> list:
    """USD, runs and runs at an unknown price among the agent runs meeting `conditions`."""
    return [sa.func.coalesce(sa.func.sum(AgentRun.cost_usd).filter(*conditions), 0),
            sa.func.count().filter(*conditions), sa.func.count().filter(*conditions, AgentRun.cost_usd.is_(None))]


def _agent_split(usd, runs, unpriced) -> dict:
    return {"usd": round(float(usd or 0), 4), "runs": int(runs), "unpriced": int(unpriced)}


def agent_spend_by_classification(start: datetime, end: datetime) -> dict:
    """Agent spend in [start, end) split by the runs' classification (SPEC §12.3): for each of
    pending (unclassified), useful, not_useful and archived, {"usd", "runs", "unpriced"}. One
    query; a run counts on the day it started, as in `spend_between`."""
    run_start = sa.func.coalesce(AgentRun.started_at, AgentRun.created_at)
    rows = db.session.execute(
        sa.select(AgentRun.classification, sa.func.coalesce(sa.func.sum(AgentRun.cost_usd), 0), sa.func.count(),
                  sa.func.count().filter(AgentRun.cost_usd.is_(None)))
        .where(run_start >= start, run_start < end).group_by(AgentRun.classification))
    split = {name: {"usd": 0.0, "runs": 0, "unpriced": 0} for name in registry.RUN_CLASSIFICATIONS}
    for name, usd, count, unpriced in rows:
        split[name] = _agent_split(usd, count, unpriced)
    return split
