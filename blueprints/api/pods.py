"""Pods and artifacts of an experiment (SPEC §6, §9.2): launch, list, stop, download."""
from __future__ import annotations

import sqlalchemy as sa

from blueprints import access
from blueprints._actions import commit_then_run
from blueprints.api._common import Routes, id_text, iso
from blueprints.pods import artifact_download
from models import Artifact, Pod, db
from services.core.records import get_by_id
from services.dispatch import artifacts, provisioner, spend, ssh_keys, watcher
from services.workflow import experiments

routes = Routes()


def pod_json(pod: Pod) -> dict:
    ssh = ssh_keys.line_for(pod)
    return {"id": str(pod.id), "name": pod.name, "status": pod.status, "account": pod.account,
            "runIndex": pod.run_index, "attempt": pod.attempt, "gpuTypeId": pod.gpu_type_id,
            "gpuCount": pod.gpu_count, "cloudType": pod.cloud_type, "providerPodId": pod.provider_pod_id,
            "progressPct": pod.progress_pct, "progressMessage": pod.progress_message, "exitCode": pod.exit_code,
            "costPerHr": pod.cost_per_hr, "uptimeSeconds": pod.uptime_seconds,
            "spendUsd": None if spend.price_unknown(pod) else round(spend.pods_spend([pod]), 4),
            "priceKnown": not spend.price_unknown(pod), "stale": watcher.is_stale(pod), "stopReason": pod.stop_reason,
            "sshHost": pod.ssh_host, "sshPort": pod.ssh_port, "sshUser": pod.ssh_user,
            "sshCommand": ssh.command if ssh else None, "sshNote": ssh.note if ssh else None,
            "agentRunId": id_text(pod.agent_run_id),
            "lastProgressAt": iso(pod.last_progress_at)}


def artifact_json(row) -> dict:
    """An artifact's metadata (never its content): a row of Artifact columns or an Artifact."""
    return {"id": str(row.id), "name": row.name, "contentType": row.content_type, "size": row.size,
            "sha256": row.sha256, "podId": id_text(row.pod_id), "createdAt": row.created_at.isoformat(),
            "status": row.status, "note": row.status_note}


@routes.post("/experiments/<ref>/launch-pods")
@access.api("dispatch")
def launch_pods(ref: str):
    """Start a dispatch of the approved spec; 409 naming the live dispatch if there is one."""
    experiment = experiments.get_experiment(ref)
    run, effects = provisioner.launch(experiment, access.actor())
    commit_then_run(effects)
    if run is None:
        return {"ok": False, "gated": True, "experiment": {"number": experiment.number,
                                                           "status": experiment.status}}, 409
    return {"ok": True, "run": {"id": str(run.id), "status": run.status}}, 202


@routes.get("/experiments/<ref>/pods")
@access.api("read")
def list_pods(ref: str):
    """Pods with status, progress and cost."""
    experiment = experiments.get_experiment(ref)
    pods = list(db.session.scalars(sa.select(Pod).where(Pod.experiment_id == experiment.id).order_by(Pod.created_at)))
    return {"pods": [pod_json(p) for p in pods], "spendUsd": round(spend.pods_spend(pods), 4),
            "spendIncomplete": any(spend.price_unknown(p) for p in pods)}  # unknown prices are not $0


@routes.post("/pods/<pod_id>/stop")
@access.api("dispatch")
def stop_pod(pod_id: str):
    """Stop one pod (volume kept); the experiment is blocked, never ended."""
    pod = get_by_id(Pod, pod_id, "No such pod.")
    effects = watcher.stop_from_owner(pod, access.actor())
    commit_then_run(effects)
    return {"ok": True, "pod": pod_json(pod)}


@routes.get("/experiments/<ref>/artifacts")
@access.api("read")
def list_artifacts(ref: str):
    """Uploaded artifacts (metadata only)."""
    experiment = experiments.get_experiment(ref)
    # Only the metadata columns: an artifact's content can be megabytes.
    rows = db.session.execute(sa.select(Artifact.id, Artifact.name, Artifact.content_type, Artifact.size,
                                        Artifact.sha256, Artifact.pod_id, Artifact.created_at, Artifact.status,
                                        Artifact.status_note)
                              .where(Artifact.experiment_id == experiment.id).order_by(Artifact.name)).all()
    return {"artifacts": [artifact_json(r) for r in rows], "usage": artifacts.usage_of("experiment", experiment.id)}


@routes.get("/artifacts/<artifact_id>")
@access.api("read")
def get_artifact(artifact_id: str):
    """One artifact's content, as a download (never rendered inline)."""
    return artifact_download(get_by_id(Artifact, artifact_id, "No such artifact."))
