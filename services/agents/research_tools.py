"""Tools over Sagan's own records that research agents use as evidence:
earlier experiments (`search_experiments`, `read_experiment`) and the run's own
experiment's artifacts (`list_artifacts`, `read_artifact`).

Other experiments are read-only and read by number; agents cite them as `#<number>`,
which the sanitizer turns into links (services.core.sanitize). Artifacts are only ever the
run's own experiment's: an id or name of another experiment's artifact is "no such
artifact here", never its content.

`read_artifact` returns text, JSON and CSV as text, and PNG/JPEG figures as image blocks
inside the tool_result (its `content` may be a list of text and image blocks). Looked up
2026-12-01: the Messages API takes base64 image sources of type image/jpeg, image/png,
image/gif and image/webp, up to 5 MB each; SVG is not among them, so an SVG figure comes
back as its (sanitized) markup, which the model reads as text.
"""
from __future__ import annotations

import json
import re
import uuid

import sqlalchemy as sa
from flask import current_app

from models import Artifact, CleanResultVersion, Experiment, Pod, PodProgressPost, db
from services.agents.toolkit import ToolContext, ToolResult, tool
from services.core import registry
from services.core.errors import Conflict, NotFound, ValidationError
from services.core.redact import redact
from services.core.sanitize import parse_fragment, text_of
from services.dispatch import artifacts

SEARCH_LIMIT = 50
LIST_MAX = 500
PLAN_SHOWN = 30_000
RESULT_SHOWN = 30_000
TEXT_SHOWN = 60_000
IMAGE_MAX_BYTES = 1_000_000  # per figure handed to the model (the API takes up to 5 MB)
MODEL_IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/webp")
TEXT_TYPES = ("text/", "application/json")


def _json(data) -> str:
    return json.dumps(data, indent=1, default=str)


def _escape_like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _clip(text: str, limit: int) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit] + f"\n… [{len(text) - limit:,} characters cut]", True)


def html_text(html: str | None) -> str:
    """A clean result's text, paragraph by paragraph, for a model to read."""
    if not html:
        return ""
    root = parse_fragment(html)
    blocks = ("p", "li", "h1", "h2", "h3", "h4", "td", "th", "figcaption", "pre", "blockquote")
    lines = [text_of(e) for e in root.iter() if isinstance(e.tag, str) and e.tag.rsplit("}", 1)[-1] in blocks]
    return "\n".join(line for line in lines if line) or text_of(root)


# --- earlier experiments -----------------------------------------------------------------------

@tool("search_experiments", "Find earlier experiments by words in their title, hypothesis, clean-result titles or "
                            "tags (every word must match somewhere), optionally of one status; newest first. "
                            "Cite them as #<number>.",
      {"text": {"type": "string", "maxLength": 300}, "status": {"type": "string", "enum": registry.STATUS_NAMES},
       "limit": {"type": "integer", "description": f"at most {SEARCH_LIMIT}; default 20"}})
def search_experiments(ctx: ToolContext, data: dict) -> ToolResult:
    words = [w for w in re.split(r"\s+", (data.get("text") or "").strip()) if w][:10]
    if not words and not data.get("status"):
        raise ValidationError("Give words to search for, a status, or both.", field="text")
    limit = max(1, min(int(data.get("limit") or 20), SEARCH_LIMIT))
    query = sa.select(Experiment.number, Experiment.title, Experiment.status, Experiment.kind, Experiment.tags,
                      Experiment.has_clean_result, Experiment.hypothesis)
    for word in words:
        pattern = f"%{_escape_like(word.lstrip('#'))}%"
        result_titles = sa.select(CleanResultVersion.id).where(
            CleanResultVersion.experiment_id == Experiment.id,
            CleanResultVersion.title.ilike(pattern, escape="\\")).exists()
        condition = sa.or_(Experiment.title.ilike(pattern, escape="\\"),
                           Experiment.hypothesis.ilike(pattern, escape="\\"),
                           sa.cast(Experiment.tags, sa.Text).ilike(pattern, escape="\\"), result_titles)
        if word.lstrip("#").isdigit() and int(word.lstrip("#")) < 2**31:
            condition = sa.or_(condition, Experiment.number == int(word.lstrip("#")))
        query = query.where(condition)
    if data.get("status"):
        query = query.where(Experiment.status == data["status"])
    if ctx.experiment is not None:
        query = query.where(Experiment.id != ctx.experiment.id)
    rows = db.session.execute(query.order_by(Experiment.number.desc()).limit(limit + 1)).all()
    found = [{"number": r.number, "cite": f"#{r.number}", "title": r.title, "status": r.status, "kind": r.kind,
              "tags": r.tags, "hasCleanResult": r.has_clean_result,
              "hypothesis": (r.hypothesis or "")[:300] or None} for r in rows[:limit]]
    if not found:
        return ToolResult("No other experiment matches. Try fewer or other words.")
    answer = {"experiments": found}
    if len(rows) > limit:
        answer["more"] = f"More experiments match; these are the newest {limit}. Narrow the words or give a status."
    return ToolResult(redact(_json(answer)))


def _key_metrics(experiment: Experiment) -> dict:
    """Each pod's latest reported metrics (what its progress posts said last)."""
    latest = (sa.select(PodProgressPost.pod_id, sa.func.max(PodProgressPost.created_at).label("at"))
              .join(Pod, Pod.id == PodProgressPost.pod_id)
              .where(Pod.experiment_id == experiment.id, PodProgressPost.metrics.is_not(None))
              .group_by(PodProgressPost.pod_id).subquery())
    rows = db.session.execute(
        sa.select(Pod.name, PodProgressPost.metrics)
        .join(PodProgressPost, PodProgressPost.pod_id == Pod.id)
        .join(latest, sa.and_(latest.c.pod_id == PodProgressPost.pod_id, latest.c.at == PodProgressPost.created_at))
        .order_by(Pod.name)).all()
    return {name: metrics for name, metrics in rows}


@tool("read_experiment", "Another experiment's record, plan, clean result (as text) and key metrics, read-only, "
                         "by its number. Cite it as #<number>.",
      {"number": {"type": "integer"}}, ["number"])
def read_experiment(ctx: ToolContext, data: dict) -> ToolResult:
    number = data["number"]
    if ctx.experiment is not None and number == ctx.experiment.number:
        raise ValidationError(f"#{number} is this run's own experiment; read it with get_experiment and get_plan.",
                              field="number")
    experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == number)) \
        if 0 < number < 2**31 else None
    if experiment is None:
        raise NotFound(f"There is no experiment #{number}; find one with search_experiments.")
    plan, plan_cut = _clip(experiment.plan_md or "", PLAN_SHOWN)
    result, result_cut = _clip(html_text(experiment.body) if experiment.has_clean_result else "", RESULT_SHOWN)
    record = {
        "number": experiment.number, "cite": f"#{experiment.number}", "title": experiment.title,
        "status": experiment.status, "kind": experiment.kind, "tags": experiment.tags,
        "hypothesis": experiment.hypothesis, "gitBranch": experiment.git_branch, "gitCommit": experiment.git_commit,
        "parentExperiment": None, "plan_markdown": plan or None, "plan_truncated": plan_cut,
        "clean_result_text": result or None, "clean_result_truncated": result_cut,
        "key_metrics": _key_metrics(experiment),
    }
    if experiment.parent_experiment_id:
        record["parentExperiment"] = db.session.scalar(
            sa.select(Experiment.number).where(Experiment.id == experiment.parent_experiment_id))
    return ToolResult(redact(_json(record)))


# --- the experiment's artifacts -------------------------------------------------------------------

@tool("list_artifacts", "The files this experiment's pods uploaded and its analyses wrote: id, name, type, size, pod.")
def list_artifacts(ctx: ToolContext, data: dict) -> ToolResult:
    experiment = ctx.need_experiment()
    rows = db.session.execute(
        sa.select(Artifact.id, Artifact.name, Artifact.content_type, Artifact.size, Artifact.status,
                  Artifact.status_note, Pod.name.label("pod"))
        .outerjoin(Pod, Pod.id == Artifact.pod_id)
        .where(Artifact.experiment_id == experiment.id).order_by(Artifact.name, Artifact.created_at)
        .limit(LIST_MAX + 1)).all()
    if not rows:
        return ToolResult("This experiment has no artifacts yet.")
    listing = _json([{"id": str(r.id), "name": r.name, "type": r.content_type, "size": r.size,
                      "pod": r.pod or ("(analysis)" if r.name.startswith("analysis/") else None),
                      **({"status": r.status} if r.status != "ready" else {}),
                      **({"note": r.status_note} if r.status_note else {})}
                     for r in rows[:LIST_MAX]])
    more = f"\n(showing the first {LIST_MAX} by name)" if len(rows) > LIST_MAX else ""
    return ToolResult(listing + more)


def own_artifact(experiment: Experiment, *, artifact_id: str | None = None, name: str | None = None) -> Artifact:
    """One of `experiment`'s artifacts by id or name; another experiment's is not found here."""
    if artifact_id:
        try:
            wanted = uuid.UUID(str(artifact_id))
        except ValueError:
            raise ValidationError(f"{artifact_id!r} is not an artifact id; list_artifacts shows them.",
                                  field="id") from None
        found = db.session.scalar(sa.select(Artifact).where(Artifact.id == wanted,
                                                            Artifact.experiment_id == experiment.id))
        if found is None:
            raise NotFound(f"Artifact {artifact_id} is not one of #{experiment.number}'s artifacts; only this "
                           "experiment's artifacts can be read (list_artifacts shows them).")
        return found
    rows = list(db.session.scalars(sa.select(Artifact).where(Artifact.experiment_id == experiment.id,
                                                             Artifact.name == name).limit(2)))
    if not rows:
        raise NotFound(f"#{experiment.number} has no artifact named {name!r} (list_artifacts shows them).")
    if len(rows) > 1:
        raise ValidationError(f"Several pods uploaded {name!r}; read one by its id (list_artifacts shows them).",
                              field="name")
    return rows[0]


def readable_artifact(experiment: Experiment, *, artifact_id: str | None = None, name: str | None = None) -> Artifact:
    """`own_artifact`, refused while it is still being processed or when processing failed
    (its content is not redacted yet, or never will be)."""
    artifact = own_artifact(experiment, artifact_id=artifact_id, name=name)
    if artifact.status == "processing":
        raise Conflict(f"{artifact.name} is still being processed (a large upload is redacted by a job); "
                       "read it again in a minute.")
    if not artifact.readable:
        raise Conflict(f"{artifact.name} cannot be read. {artifact.status_note or ''}".strip())
    return artifact


@tool("read_artifact", "Read one of this experiment's artifacts by id (or by name): text, JSON and CSV as text, "
                       "PNG/JPEG figures as images you can look at, SVG as its markup.",
      {"id": {"type": "string", "maxLength": 64}, "name": {"type": "string", "maxLength": 500}})
def read_artifact(ctx: ToolContext, data: dict) -> ToolResult:
    if not data.get("id") and not data.get("name"):
        raise ValidationError("Give the artifact's id or its name (list_artifacts shows both).", field="id")
    artifact = readable_artifact(ctx.need_experiment(), artifact_id=data.get("id"), name=data.get("name"))
    header = f"{artifact.name} ({artifact.content_type}, {artifact.size:,} bytes)"
    if artifact.content_type in MODEL_IMAGE_TYPES:
        if artifact.size > IMAGE_MAX_BYTES:
            return ToolResult(f"{header}: too large to show as an image (limit {IMAGE_MAX_BYTES:,} bytes); draw a "
                              "smaller version with run_analysis.")
        return ToolResult(f"{header}: the image follows.", images=[(artifact.content_type, artifact.content)])
    if artifact.content_type == "image/svg+xml":
        # Its figure's markup, sanitized when it was stored: sanitizing here would cost the
        # agent's job about five seconds a megabyte.
        markup = artifacts.markup_of(artifact)
        if markup is None:
            return ToolResult(f"{header}: SVG too large to show as markup ({artifact.status_note or 'no figure'}); "
                              "draw a smaller version with run_analysis.")
        text, _ = _clip(markup, TEXT_SHOWN)
        return ToolResult(f"{header}: SVG is not an image type the model API takes, so here is its markup:\n{text}")
    if artifact.content_type.startswith(TEXT_TYPES):
        text, _ = _clip(artifact.content.decode("utf-8", errors="replace"), TEXT_SHOWN)
        return ToolResult(redact(f"{header}\n{text}"))
    return ToolResult(f"{header}: binary; not shown.")


# --- figures in clean results ---------------------------------------------------------------------

_ARTIFACT_SRC = re.compile(r"""src\s*=\s*(["'])artifact:([^"']{1,500})\1""")
EMBEDDABLE = ("image/png", "image/jpeg", "image/svg+xml")


def embed_artifacts(experiment: Experiment, html: str) -> str:
    """`<img src="artifact:NAME">` (or `artifact:ID`) in a clean result becomes the image itself,
    as a data URL: the result must be self-contained (SPEC §8.1), and an analysis's figures
    are artifacts. An unknown name or a non-image is a clear error; nothing is saved."""
    import base64

    def replace(match: re.Match) -> str:
        ref = match.group(2).strip()
        try:
            artifact = readable_artifact(experiment, artifact_id=ref) if _looks_like_uuid(ref) \
                else readable_artifact(experiment, name=ref)
        except (NotFound, Conflict) as exc:
            raise ValidationError(f"The clean result embeds artifact:{ref}, but {exc.message} Nothing was saved.",
                                  field="html") from None
        if artifact.content_type not in EMBEDDABLE:
            raise ValidationError(f"artifact:{ref} is {artifact.content_type}; only PNG, JPEG and SVG figures can "
                                  "be embedded. Nothing was saved.", field="html")
        if artifact.size > current_app.config["ARTIFACT_MAX_BYTES"]:
            raise ValidationError(f"artifact:{ref} is too large to embed. Nothing was saved.", field="html")
        data = base64.b64encode(artifact.content).decode()
        return f'src="data:{artifact.content_type};base64,{data}"'
    return _ARTIFACT_SRC.sub(replace, html)


def _looks_like_uuid(text: str) -> bool:
    try:
        uuid.UUID(text)
    except ValueError:
        return False
    return True
