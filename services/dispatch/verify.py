"""Upload verification (SPEC §6.10): every declared `/workspace/…` artifact must have been
uploaded; remote URIs are listed as declared links. The result is an
`epm:upload-verification` marker with a table; missing artifacts block the experiment."""
from __future__ import annotations

import sqlalchemy as sa

from models import AgentRun, Artifact, Experiment, db
from services import lifecycle, markers
from services.actors import Actor
from services.dispatch import spec as specs
from services.errors import SaganError

ARTIFACT_ROOTS = ("/workspace/sagan-artifacts/", "/workspace/")
REMOTE = ("hf://", "wandb://", "repo://")


def _relative(path: str) -> str:
    for root in ARTIFACT_ROOTS:
        if path.startswith(root):
            return path[len(root):]
    return path.lstrip("/")


def _matches(declared: str, names: list[str]) -> list[str]:
    relative = _relative(declared)
    if declared.endswith("/"):
        folder = relative.rstrip("/")
        leaf = folder.rsplit("/", 1)[-1]
        return [n for n in names if n.startswith(folder + "/") or f"/{leaf}/" in f"/{n}" or n.startswith(leaf + "/")]
    leaf = relative.rsplit("/", 1)[-1]
    return [n for n in names if n == relative or n.endswith("/" + relative) or n == leaf]


def verification_table(experiment: Experiment) -> dict:
    declared: list[str] = []
    for pod in specs.as_pods(experiment.pod_spec) or []:
        declared += [a for a in ((pod.get("config") or {}).get("artifacts") or []) if isinstance(a, str)]
    names = list(db.session.scalars(sa.select(Artifact.name).where(Artifact.experiment_id == experiment.id)))
    rows, missing, links = [], [], []
    for path in declared:
        if path.startswith(REMOTE):
            links.append(path)
            rows.append({"declared": path, "found": [], "status": "link"})
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
            f"{len(table['missing'])} missing, {len(table['links'])} remote link(s); "
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
