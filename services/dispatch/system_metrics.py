"""What a pod's machine is doing: the `sys/…` metrics the bootstrap's sampler posts (GPU
utilisation and memory from nvidia-smi, CPU, RAM, disk: scripts/sagan_metrics.py), read
back for the pod card, and the idle-GPU flag.

A paid pod whose GPUs all sit under IDLE_BELOW % for IDLE_MINUTES while its script runs is
burning money for nothing: the pod card, the board card and the owner's queue say so
("pod 2: GPU idle for 15 min — $1.49/h"). The judgement uses the server's clock — when each
sample's batch arrived (`metric_batches.created_at`) — not the pod's, and it needs samples:
a pod whose sampler went quiet for STALE_AFTER is not called idle (nothing is known), and a
machine without nvidia-smi posts no GPU utilisation at all, so it is never flagged (its card
says GPU use is not measured).
"""
from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa

from models import Experiment, MetricBatch, MetricChunk, MetricSeries, Pod, db
from services.core import pod_accounts, records
from services.core.clock import utcnow

PREFIX = "sys/"
GPU_UTIL = "sys/gpu_util [%]"   # the busiest GPU's utilisation: under the line, every GPU idles
GPU_COUNT = "sys/gpus"          # 0: the machine has no nvidia-smi (or it lists no GPU)
IDLE_BELOW = 5.0
IDLE_MINUTES = 15
# Samples come every 30 s; three minutes without one means the sampler is not reporting.
STALE_AFTER = timedelta(minutes=3)
# How far back a pod's samples are read to find when its idle stretch began.
LOOK_BACK = timedelta(hours=2)

# The card's line, in this order, with the words each reading gets.
CARD_READINGS = (("sys/gpu_util [%]", "GPU", "%"), ("sys/gpu_mem [%]", "GPU memory", "%"),
                 ("sys/cpu [%]", "CPU", "%"), ("sys/ram [%]", "RAM", "%"), ("sys/disk [%]", "disk", "%"))


@dataclass
class IdleGpu:
    pod_id: uuid.UUID
    experiment_id: uuid.UUID
    run_index: int
    minutes: int
    rate_usd_per_hour: float | None   # None: the provider told no rate and none is set

    @property
    def words(self) -> str:
        rate = f"${self.rate_usd_per_hour:,.2f}/h" if self.rate_usd_per_hour is not None else "price unknown"
        return f"pod {self.run_index}: GPU idle for {self.minutes} min — {rate}"


def _watched(pod) -> bool:
    """A pod whose idle GPUs cost money: on RunPod (local pods bill nothing), and its script
    still running (exited pods wait in keep-alive, idle by design)."""
    return pod_accounts.bills(pod.account) and pod.status == "running" and pod.exit_code is None


def idle_gpus(pods, now: datetime | None = None) -> dict[uuid.UUID, IdleGpu]:
    """pod id → IdleGpu for the given pods whose GPUs have idled IDLE_MINUTES or more; one
    query for any number of pods, none when no pod is watched."""
    watched = {p.id: p for p in pods if _watched(p)}
    if not watched:
        return {}
    now = now or utcnow()
    rows = db.session.execute(
        sa.select(MetricSeries.pod_id, MetricBatch.created_at, MetricChunk.point_values)
        .join(MetricChunk, MetricChunk.series_id == MetricSeries.id)
        .join(MetricBatch, sa.and_(MetricBatch.pod_id == MetricSeries.pod_id, MetricBatch.seq == MetricChunk.seq))
        .where(MetricSeries.pod_id.in_(list(watched)), MetricSeries.name == GPU_UTIL,
               MetricBatch.created_at >= now - LOOK_BACK))
    samples: dict = {}
    for pod_id, at, values in rows:
        finite = [v for v in (values or []) if v is not None]
        if finite:
            samples.setdefault(pod_id, []).append((at, max(finite)))
    found = {}
    for pod_id, taken in samples.items():
        minutes = _idle_minutes(sorted(taken), now)
        if minutes is not None and minutes >= IDLE_MINUTES:
            pod = watched[pod_id]
            rate = pod.adjusted_cost_per_hr if pod.adjusted_cost_per_hr is not None else pod.cost_per_hr
            found[pod_id] = IdleGpu(pod_id, pod.experiment_id, pod.run_index, minutes,
                                    None if rate is None else float(rate))
    return found


def _idle_minutes(samples: list[tuple[datetime, float]], now: datetime) -> int | None:
    """Whole minutes since the idle stretch began — the first sample under the line after
    the last one above it — or None when the latest sample is busy or too old to tell."""
    if not samples or now - samples[-1][0] > STALE_AFTER or samples[-1][1] >= IDLE_BELOW:
        return None
    start = samples[-1][0]
    for at, value in reversed(samples):
        if value >= IDLE_BELOW:
            break
        start = at
    return int((now - start).total_seconds() // 60)


def idle_by_experiment(experiment_ids) -> dict[uuid.UUID, list[IdleGpu]]:
    """experiment id → its pods with idle GPUs (the board's cards): two queries at most."""
    ids = list(experiment_ids)
    if not ids:
        return {}
    pods = db.session.scalars(sa.select(Pod).where(records.among(Pod.experiment_id, ids), Pod.status == "running",
                                                   Pod.account.not_in(pod_accounts.free()))).all()
    out: dict = {}
    for idle in idle_gpus(pods).values():
        out.setdefault(idle.experiment_id, []).append(idle)
    return out


def idle_everywhere() -> list[tuple]:
    """(experiment, IdleGpu) for every running paid pod idling now, for the owner's queue."""
    pods = db.session.scalars(sa.select(Pod).where(Pod.status == "running", Pod.account.not_in(pod_accounts.free()))).all()
    idle = idle_gpus(pods)
    if not idle:
        return []
    experiments = {e.id: e for e in db.session.scalars(sa.select(Experiment).where(
        Experiment.id.in_({i.experiment_id for i in idle.values()})))}
    return sorted(((experiments[i.experiment_id], i) for i in idle.values()),
                  key=lambda pair: (pair[0].number, pair[1].run_index))


@dataclass
class Readings:
    """A pod's latest system readings for its card."""
    values: dict            # metric name → latest value
    gpus: int | None        # GPUs nvidia-smi listed; 0: none (no nvidia-smi), None: no sample yet

    @property
    def line(self) -> list[tuple[str, str]]:
        out = []
        for name, words, unit in CARD_READINGS:
            value = self.values.get(name)
            if value is not None:
                out.append((words, f"{value:.0f}{unit}"))
        return out


def readings_for(pod_ids) -> dict[uuid.UUID, Readings]:
    """pod id → its latest `sys/…` readings (the series summaries: one query, no points)."""
    ids = list(pod_ids)
    if not ids:
        return {}
    rows = db.session.execute(sa.select(MetricSeries.pod_id, MetricSeries.name, MetricSeries.last_value).where(
        MetricSeries.pod_id.in_(ids), MetricSeries.name.like(PREFIX + "%")))
    out: dict = {}
    for pod_id, name, value in rows:
        out.setdefault(pod_id, Readings({}, None)).values[name] = value
    for readings in out.values():
        count = readings.values.get(GPU_COUNT)
        readings.gpus = None if count is None else int(count)
    return out
