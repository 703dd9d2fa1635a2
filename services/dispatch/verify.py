"""Upload verification (SPEC §6.10): every declared artifact — a path or glob relative to
the checkout (`runs/factor_screen/*.json`) or a `/workspace/…` path — must have been
uploaded; remote URIs (`hf://`, `wandb://`, `https://`, `repo://`) are recorded as links and
shown as "not verified", never counted as found. The result is an
`epm:upload-verification` marker with a table; missing artifacts block the experiment."""
from __future__ import annotations

import fnmatch

import sqlalchemy as sa

from models import AgentRun, Artifact, Experiment, db
from services.core.actors import Actor
from services.core.errors import SaganError
from services.dispatch import spec as specs
from services.workflow import lifecycle, markers

ARTIFACT_ROOTS = ("/workspace/sagan-artifacts/", "/workspace/")
REMOTE = specs.REMOTE_ARTIFACTS
GLOB_CHARS = set("*?[")


def _relative(path: str) -> str:
    for root in ARTIFACT_ROOTS:
        if path.startswith(root):
            return path[len(root):]
    return path.lstrip("/")


def _matches(declared: str, names: list[str]) -> list[str]:
    relative = _relative(declared)
    if GLOB_CHARS & set(relative):
        # Uploaded names are relative to the checkout; a /workspace/<repo>/… pattern has the
        # checkout's folder in front, so its trailing components are tried too.
        parts = relative.split("/")
        patterns = {"/".join(parts[i:]) for i in range(len(parts))}
        return [n for n in names if any(fnmatch.fnmatchcase(n, p) for p in patterns)]
    if declared.endswith("/"):
        folder = relative.rstrip("/")
        leaf = folder.rsplit("/", 1)[-1]
        return [n for n in names if n.startswith(folder + "/") or f"/{leaf}/" in f"/{n}" or n.startswith(leaf + "/")]
    leaf = relative.rsplit("/", 1)[-1]
    return [n for n in names if n == relative or n.endswith("/" + relative) or relative.endswith("/" + n)
            or n == leaf]


def verification_table(experiment: Experiment) -> dict:
    declared: list[str] = []
    for pod in specs.as_pods(experiment.pod_spec) or []:
        declared += [a for a in ((pod.get("config") or {}).get("artifacts") or []) if isinstance(a, str)]
    names = list(db.session.scalars(sa.select(Artifact.name).where(Artifact.experiment_id == experiment.id)))
    rows, missing, links = [], [], []
    for path in declared:
        if path.startswith(REMOTE):
            links.append(path)
            rows.append({"declared": path, "found": [], "status": "not verified"})
            continue
        found = _matches(path, names)
        rows.append({"declared": path, "found": found[:20], "status": "found" if found else "missing"})
        if not found:
            missing.append(path)
    return {"rows": rows, "missing": missing, "links": links, "uploaded": len(names)}


def verify_uploads(experiment: Experiment, run: AgentRun | None, actor: Actor) -> dict:
    """Post the verification marker; block on missing artifacts, else move on to interpreting."""
    table = verification_table(experiment)
    note = (f"{len(table['rows']) - len(table['missing']) - len(table['links'])} found, "
            f"{len(table['missing'])} missing, {len(table['links'])} remote link(s) not verified; "
            f"{table['uploaded']} file(s) uploaded.")
    markers.post_marker(experiment, "epm:upload-verification", actor, note=note, metadata={"table": table})
    if table["missing"]:
        effects = lifecycle.transition(
            experiment, "blocked", actor,
            note=("Upload verification failed: missing " + ", ".join(table["missing"]))[:1900],
            metadata={"reason": "artifacts_missing", "table": table})
    else:
        try:
            effects = lifecycle.transition(experiment, "interpreting", Actor("agent", None, "upload verifier"),
                                           note="Uploads verified.")
        except SaganError:
            effects = []
    db.session.commit()
    lifecycle.run_side_effects(effects)
    return table
