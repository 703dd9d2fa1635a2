"""What pages show about pods: cards, a small progress chart, artifact previews. Built
server-side from our own numbers, so the chart SVG needs no sanitizing."""
from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass, field

import sqlalchemy as sa
from markupsafe import Markup

from models import AgentRun, Artifact, Experiment, Figure, Pod, PodProgressPost, db
from services.core import records
from services.dispatch import artifacts, provisioner, spend, ssh_keys, system_metrics, watcher

CHART_POINTS = 60


@dataclass
class PodCard:
    pod: Pod
    stale: bool
    spend_usd: float
    chart: Markup | None   # inline SVG polyline of progress over time, or None
    retention_warning: str | None = None  # a day before a stopped pod is terminated
    price_unknown: bool = False            # shown as unknown, never as $0
    ssh: ssh_keys.SshLine | None = None    # the ssh command, or why there is none (RunPod pods)
    artifacts: dict | None = None          # files and bytes stored against the pod's budgets
    failed_artifacts: list = field(default_factory=list)  # (name, why) of uploads that could not be processed
    readings: system_metrics.Readings | None = None  # the latest sys/… metrics (GPU, CPU, RAM, disk)
    idle: system_metrics.IdleGpu | None = None       # a paid pod whose GPUs idle while its script runs


def pods_for(experiment: Experiment) -> list[PodCard]:
    pods = list(db.session.scalars(sa.select(Pod).where(Pod.experiment_id == experiment.id)
                                   .order_by(Pod.created_at.desc())))
    posts = {}
    if pods:
        rows = db.session.execute(sa.select(PodProgressPost.pod_id, PodProgressPost.progress_pct,
                                            PodProgressPost.created_at)
                                  .where(PodProgressPost.pod_id.in_([p.id for p in pods]))
                                  .order_by(PodProgressPost.created_at)).all()
        for row in rows:
            posts.setdefault(row.pod_id, []).append((row.created_at, row.progress_pct))
    usage = artifacts.usage_by_id("pod", [p.id for p in pods])
    failed: dict = {}
    for row in db.session.execute(sa.select(Artifact.pod_id, Artifact.name, Artifact.status_note).where(
            Artifact.experiment_id == experiment.id, Artifact.status == "failed").order_by(Artifact.name)):
        failed.setdefault(row.pod_id, []).append((row.name, row.status_note))
    readings = system_metrics.readings_for([p.id for p in pods])
    idle = system_metrics.idle_gpus(pods)
    return [PodCard(p, watcher.is_stale(p), spend.pods_spend([p]), _chart(posts.get(p.id, [])),
                    watcher.retention_warning(p), spend.price_unknown(p), ssh_keys.line_for(p), usage[p.id],
                    failed.get(p.id, []), readings.get(p.id), idle.get(p.id))
            for p in pods]


def _chart(points) -> Markup | None:
    """A tiny progress-over-time line (0–100 %), 120 × 32 viewBox.

    Markup we build from our own numbers (floats formatted here), not from pod text, so it
    is safe without the sanitizer.
    """
    if len(points) < 2:
        return None
    points = points[-CHART_POINTS:]
    start, end = points[0][0], points[-1][0]
    span = max((end - start).total_seconds(), 1)
    coords = " ".join(f"{(t - start).total_seconds() / span * 120:.1f},{32 - pct / 100 * 30 - 1:.1f}"
                      for t, pct in points)
    return Markup(f'<svg class="pod-chart" viewBox="0 0 120 32" role="img" aria-label="progress over time">'
            f'<polyline points="{coords}" fill="none" stroke="currentColor" stroke-width="1.5"/></svg>')


def live_dispatch(experiment: Experiment) -> AgentRun | None:
    return provisioner.live_dispatch(experiment.id)


def can_dispatch(experiment: Experiment) -> bool:
    """Show the Dispatch button: an approved spec exists and the experiment is ready to run."""
    return bool(experiment.pod_spec) and experiment.status in ("approved", "implementing", "testing")


@dataclass
class ArtifactView:
    artifact: Artifact
    table: list[list[str]] | None = None   # JSON objects or CSV rows, first rows only
    svg_html: str | None = None            # the figure's sanitized SVG (stored sanitized at upload)
    image_uri: str | None = None           # a data: URI for PNG/JPEG figures

    @property
    def processing(self) -> bool:
        return self.artifact.status == "processing"

    @property
    def failed(self) -> bool:
        return self.artifact.status == "failed"


def artifacts_for(experiment: Experiment) -> list[ArtifactView]:
    import base64

    rows = list(db.session.scalars(sa.select(Artifact).where(Artifact.experiment_id == experiment.id)
                                   .order_by(Artifact.name)))
    figures = {f.artifact_id: f for f in db.session.scalars(
        sa.select(Figure).where(Figure.experiment_id == experiment.id, Figure.artifact_id.is_not(None)))}
    views = []
    for artifact in rows:
        if not artifact.readable:  # nothing of it is shown until it is processed
            views.append(ArtifactView(artifact))
            continue
        view = ArtifactView(artifact, _table(artifact))
        figure = figures.get(artifact.id)
        if figure is not None and figure.kind == "svg":
            view.svg_html = figure.content
        elif figure is not None and figure.kind == "image" and artifact.size <= 2 * 1024 * 1024:
            view.image_uri = f"data:{artifact.content_type};base64,{base64.b64encode(artifact.content).decode()}"
        views.append(view)
    return views


def _table(artifact: Artifact) -> list[list[str]] | None:
    if artifact.size > 256 * 1024:
        return None
    try:
        text = artifact.content.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if artifact.content_type == "application/json":
        try:
            data = json.loads(text)
        except ValueError:
            return None
        if isinstance(data, dict):
            return [[str(k), json.dumps(v)[:120]] for k, v in list(data.items())[:30]]
        return None
    if artifact.content_type in ("text/csv", "text/tab-separated-values"):
        dialect = "excel-tab" if artifact.content_type.endswith("values") else "excel"
        return [row[:12] for row in list(csv.reader(io.StringIO(text), dialect=dialect))[:21]]
    return None


def board_progress(experiment_ids) -> dict:
    """experiment id → (pct, message, spend) from live pods, in one query (for board cards)."""
    if not experiment_ids:
        return {}
    rows = db.session.scalars(sa.select(Pod).where(records.among(Pod.experiment_id, experiment_ids),
                                                   Pod.status.in_(("deploying", "running", "exited")))).all()
    result: dict = {}
    for pod in rows:
        pct, message, spent = result.get(pod.experiment_id, (None, None, 0.0))
        pod_pct = pod.progress_pct or 0
        result[pod.experiment_id] = (pod_pct if pct is None else min(pct, pod_pct),
                                     message or pod.progress_message, spent + spend.pods_spend([pod]))
    return result
