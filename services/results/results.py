"""Clean results (SPEC §8.1–8.4): the experiment's sanitized HTML write-up, its versions,
lint, figures, previews and promotion.

The body is sanitized with the result policy (services.core.sanitize.sanitize_result_html) when
it is written — by the owner's editor, the API or the analyzer's `write_clean_result`
tool — and every save keeps a CleanResultVersion. Each save is linted and the report is
posted as `epm:clean-result-lint`. Promotion (awaiting_promotion → shared | completed) asks
for confirmation when lint fails and posts `epm:promoted`.

Promotion also freezes the result (PromotedResult: title, body, figures): share links show
that copy and nothing else, so a save after promotion — by the owner, an agent or any
token that may write — changes the owner's draft, not what mentors read, until the owner
promotes again (which an experiment already shared or completed may do in place).
"""
from __future__ import annotations

import base64
import hashlib
import re
import secrets
import uuid
from dataclasses import dataclass

import sqlalchemy as sa
from flask import current_app

from models import Artifact, CleanResultVersion, Experiment, Figure, PromotedResult, db
from services.core import events, redis_store, registry
from services.core.actors import Actor
from services.core.clock import utcnow
from services.core.errors import Conflict, Forbidden, NotFound, TooLarge, ValidationError
from services.core.records import get_by_id
from services.core.redact import redact
from services.core.sanitize import local_name, parse_fragment, sanitize_result_html, text_of
from services.core.unlocked import outside_transaction
from services.dispatch import artifacts
from services.results.result_lint import (
    LintReport,
    confidence_of,
    lint,
    title_without_confidence,
    tldr_items,
    tldr_label,
)
from services.workflow import lifecycle, markers
from services.workflow.experiments import clean_fields

PROMOTION_TARGETS = tuple(registry.PROMOTION_TARGETS)
FIGURE_MAX_BYTES = 2 * 1024 * 1024
DRAFT_TTL_SECONDS = 30 * 60
IMAGE_SIGNATURES = {"image/png": b"\x89PNG\r\n\x1a\n", "image/jpeg": b"\xff\xd8\xff"}


class LintFailed(Conflict):
    """Promotion refused until the owner confirms a result whose lint fails."""

    code = "lint_failed"


@dataclass
class Saved:
    version: int
    changed: bool
    report: LintReport


# --- writing ------------------------------------------------------------------------------

def _check_size(text: str, what: str) -> None:
    limit = current_app.config["BODY_MAX"]
    size = len(text.encode())
    if size > limit:
        raise TooLarge(f"The {what} is {size:,} bytes; the limit is {limit:,}.")


def clean_body(html) -> str:
    """Validate and sanitize a clean-result body (redacted first); never empty."""
    if not isinstance(html, str) or not html.strip():
        raise ValidationError("The clean result is empty.", field="html")
    _check_size(html, "clean result")
    body = sanitize_result_html(redact(html))
    if not text_of(parse_fragment(body)) and "<svg" not in body and "<img" not in body:
        raise ValidationError("Nothing is left of the clean result after removing what is not allowed "
                              "(scripts, frames, remote loads).", field="html")
    return body


def styled_for_light_only(body_html: str | None) -> bool:
    """A result whose own stylesheet paints for a light page and says nothing of dark mode
    (a light-blue TL;DR box with no text colour of its own, as results written for the old
    system are): shown light in a dark page too, since the dark frame's light text on the
    result's light boxes would be unreadable. A result without a stylesheet, or one that
    styles its own dark mode, follows the page."""
    body = (body_html or "").lower()
    return "<style" in body and "prefers-color-scheme" not in body


@dataclass(frozen=True)
class ResultSummary:
    """A finished experiment's first screen: the finding (the result's title) with its
    confidence, the key numbers (the TL;DR's Results bullet) and the primary figure."""
    finding: str
    confidence: str | None
    numbers: str | None
    figure_html: str | None    # the body's <figure id="figure"> with the result's styles, sanitized
    figure: "FigureView | None"  # else the first attached figure


_FIGURE_ELEMENT = re.compile(r'<figure\b[^>]*\bid="figure"[^>]*>.*?</figure>', re.S)
_STYLE_ELEMENT = re.compile(r"<style>.*?</style>", re.S)


def summary(experiment: Experiment, attached: list | None = None) -> ResultSummary | None:
    """The summary of the experiment's clean result, or None without one. `attached`: its
    figures when the caller already has them."""
    if not experiment.body:
        return None
    numbers = None
    for item in tldr_items(experiment.body):
        if tldr_label(item) == "Results":
            numbers = re.sub(r"^results\s*:?\s*", "", text_of(item), flags=re.I) or None
            break
    figure_html = None
    found = _FIGURE_ELEMENT.search(experiment.body)
    if found:
        # Cut from a sanitized body and sanitized again: a cut cannot leave anything open.
        figure_html = sanitize_result_html("".join(_STYLE_ELEMENT.findall(experiment.body)) + found.group(0))
    attached = figures(experiment) if attached is None and not figure_html else (attached or [])
    return ResultSummary(finding=title_without_confidence(experiment.title), confidence=confidence_of(experiment.title),
                         numbers=numbers, figure_html=figure_html,
                         figure=None if figure_html or not attached else attached[0])


def original_question(experiment: Experiment) -> str:
    """What the experiment asked: its title before a clean result's title replaced it."""
    return experiment.question or experiment.title


def version_count(experiment: Experiment) -> int:
    return db.session.scalar(sa.select(sa.func.count(CleanResultVersion.id))
                             .where(CleanResultVersion.experiment_id == experiment.id)) or 0


@dataclass(frozen=True)
class PreparedResult:
    """A clean result's sanitized body, its title and their lint, ready to store."""

    body: str
    title: str
    report: LintReport


def prepare_result(experiment: Experiment, html: str | None, title: str | None = None) -> PreparedResult:
    """Sanitize and lint a clean-result body and/or title, writing nothing.

    The sanitizing and the lint (each a parse of up to BODY_MAX bytes) run with no
    transaction open (services.core.unlocked: on SQLite an open one holds the write lock).
    `html=None` keeps the current body (a title-only change).
    """
    if html is None and title is None:
        raise ValidationError("Send the clean result's html, its title, or both.", field="html")
    new_title = experiment.title
    if title is not None:
        new_title = clean_fields({"title": title}, partial=True)["title"]
    return outside_transaction(_prepare_result, html, experiment.body, new_title)


def _prepare_result(html: str | None, current_body: str | None, title: str) -> PreparedResult:
    body = clean_body(html) if html is not None else current_body
    if not body:
        raise ValidationError("There is no clean result yet; send its html first.", field="html")
    return PreparedResult(body, title, lint(title, body))


def save_clean_result(experiment: Experiment, html: str | None | PreparedResult, actor: Actor, *,
                      title: str | None = None) -> Saved:
    """Sanitize and store a clean-result body and/or title as a new version; lint it.

    `html=None` keeps the current body (a title-only change); a PreparedResult
    (prepare_result) was sanitized before the caller's transaction opened. Saving what is
    already stored changes nothing and makes no version. The caller commits.
    """
    prepared = html if isinstance(html, PreparedResult) else prepare_result(experiment, html, title)
    body, new_title, report = prepared.body, prepared.title, prepared.report
    count = version_count(experiment)
    if body == experiment.body and new_title == experiment.title and count:
        return Saved(count, False, report)
    if new_title != experiment.title and not experiment.question:
        experiment.question = experiment.title  # the question, before the finding replaces it
    experiment.title = new_title
    experiment.body = body
    experiment.has_clean_result = True
    experiment.updated_at = utcnow()
    db.session.add(CleanResultVersion(experiment_id=experiment.id, title=new_title, body=body,
                                      author_kind=actor.kind, author_id=actor.id))
    events.record(experiment, "note", actor, note=f"Clean result saved (version {count + 1}).",
                  metadata={"clean_result_version": count + 1})
    post_lint(experiment, actor, report)
    return Saved(count + 1, True, report)


def post_lint(experiment: Experiment, actor: Actor, report: LintReport | None = None) -> LintReport:
    """Record the lint report as an `epm:clean-result-lint` marker; the caller commits."""
    report = report or lint(experiment.title, experiment.body)
    markers.post_marker(experiment, "epm:clean-result-lint", actor, note=report.summary()[:1900],
                        metadata=report.as_json())
    return report


def report_for(experiment: Experiment) -> LintReport | None:
    return lint(experiment.title, experiment.body) if experiment.body else None


def versions(experiment: Experiment) -> list[tuple[int, CleanResultVersion]]:
    """(number, version), newest first."""
    rows = list(db.session.scalars(sa.select(CleanResultVersion)
                                   .where(CleanResultVersion.experiment_id == experiment.id)
                                   .order_by(CleanResultVersion.created_at, CleanResultVersion.id)))
    return [(i + 1, row) for i, row in enumerate(rows)][::-1]


def get_version(experiment: Experiment, number: int) -> CleanResultVersion:
    for n, row in versions(experiment):
        if n == number:
            return row
    raise NotFound(f"#{experiment.number} has no clean-result version {number}.")


def excerpt(body_html: str | None, limit: int = 200) -> str:
    """One line for a list: the TL;DR's Results bullet, else the first paragraph."""
    root = parse_fragment(body_html or "")
    items = [text_of(e) for e in root.iter() if local_name(e.tag) == "li"]
    line = next((t for t in items if t.lower().startswith("results")), None)
    if line is None:
        line = next((text_of(e) for e in root.iter() if local_name(e.tag) == "p" and text_of(e)), "")
    line = re.sub(r"^results\s*:\s*", "", line, flags=re.I)
    line = line[:1].upper() + line[1:]
    return line if len(line) <= limit else line[: limit - 1].rstrip() + "…"


# --- previews -----------------------------------------------------------------------------

def _draft_key(experiment: Experiment, key: str) -> str:
    return f"sagan:result-draft:{experiment.id}:{key}"


def store_draft(experiment: Experiment, html: str, title: str | None = None) -> tuple[str, str, LintReport]:
    """Sanitize an unsaved body for the live preview; kept briefly in Redis.

    The preview is shown in a frame loaded from its own URL (not srcdoc): a srcdoc frame
    inherits the page's CSP, which allows only the styles the page was rendered with.
    """
    title = title if title is not None else experiment.title
    body, report = outside_transaction(lambda: _sanitized_and_linted(html, title))
    key = secrets.token_urlsafe(12)
    redis_store.connection().set(_draft_key(experiment, key), body.encode(), ex=DRAFT_TTL_SECONDS)
    return key, body, report


def _sanitized_and_linted(html: str, title: str | None) -> tuple[str, LintReport]:
    body = clean_body(html)
    return body, lint(title, body)


def load_draft(experiment: Experiment, key: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_-]{8,40}", key or ""):
        raise NotFound("That preview has expired.")
    raw = redis_store.connection().get(_draft_key(experiment, key))
    if raw is None:
        raise NotFound("That preview has expired; type in the editor to make a new one.")
    return raw.decode()


# --- promotion ----------------------------------------------------------------------------

def promote(experiment: Experiment, to: str, actor: Actor, *, confirm_lint: bool = False,
            note: str | None = None, expected_status: str | None = None,
            scope_grant: str | None = None, expected_result: str | None = None) -> list[lifecycle.SideEffect]:
    """awaiting_promotion → shared | completed, with `epm:promoted` (SPEC §8.4); the result as
    it is now becomes what share links show (record_promotion). An experiment already
    shared or completed is promoted again in place, to the same status: its latest edit
    becomes what mentors see.

    Refused (LintFailed, nothing changed) when lint fails and the owner has not confirmed,
    and (Conflict `result_changed`) when `expected_result` — the result_tag of the result
    the owner read — no longer matches: someone saved in between. Returns the side effects
    to run after the caller commits.
    """
    if to not in PROMOTION_TARGETS:
        raise ValidationError("Promote to shared (mentors can see it through share links) or completed.",
                              field="to")
    lifecycle.check_expected(experiment, expected_status)
    again = experiment.status in PROMOTION_TARGETS
    if again and to != experiment.status:
        raise Conflict(f"#{experiment.number} is {experiment.status}; promote it again as {experiment.status}, "
                       "or reopen it to promote it otherwise.", code="transition_not_allowed",
                       current=experiment.status)
    if not again and experiment.status != "awaiting_promotion":
        raise Conflict(f"#{experiment.number} is {experiment.status.replace('_', ' ')}; only a result "
                       "awaiting promotion can be promoted.", code="transition_not_allowed",
                       current=experiment.status)
    if not experiment.body:
        raise ValidationError(f"#{experiment.number} has no clean result to promote.", field="to")
    if expected_result is not None and expected_result != result_tag(experiment):
        raise Conflict(f"The clean result of #{experiment.number} changed since you opened the page; read it "
                       "again, then promote.", code="result_changed")
    report = lint(experiment.title, experiment.body)
    if not report.passed and not confirm_lint:
        raise LintFailed(f"Lint found {len(report.problems)} problem(s): "
                         + "; ".join(f.message for f in report.problems)
                         + " Confirm to promote anyway.", findings=report.as_json()["findings"])
    effects: list[lifecycle.SideEffect] = []
    if again:
        # No move to make: the same owner-only promotion, minus the status change.
        if actor.transition_role != lifecycle.OWNER and scope_grant != "promote":
            raise Forbidden("Only the owner, or a token with the promote scope, promotes a result.")
        # The experiment's row lock orders two promotions at once, as a move's update does.
        db.session.execute(sa.select(Experiment.id).where(Experiment.id == experiment.id).with_for_update())
        record_promotion(experiment, to, actor)
    else:
        effects = lifecycle.transition(experiment, to, actor, note=note, metadata={"promoted": True},
                                       scope_grant=scope_grant)
    markers.post_marker(experiment, "epm:promoted", actor,
                        note=note or (f"Promoted again to {to}." if again else f"Promoted to {to}."),
                        metadata={"to": to, "lint_passed": report.passed, "again": again,
                                  "lint_confirmed": bool(confirm_lint and not report.passed)})
    return effects


def record_promotion(experiment: Experiment, to: str, actor: Actor | None = None,
                     metadata: dict | None = None, *, at=None) -> PromotedResult | None:
    """Freeze the result as it stands in this transaction — title, body, figures — as what
    share links show from now on; the caller commits. Run inside the promoting move
    (lifecycle.IN_MOVE), by a promotion made again in place, and by the importer. A
    promotion without a clean result shares nothing (a copy from before goes). `at`: when
    it was promoted, if not now (an imported result, promoted in the old system)."""
    row = db.session.scalar(sa.select(PromotedResult).where(PromotedResult.experiment_id == experiment.id))
    if not experiment.body:
        if row is not None:
            db.session.delete(row)
        return None
    if row is None:
        row = PromotedResult(experiment_id=experiment.id)
        db.session.add(row)
    row.promoted_to, row.promoted_at = to, at or utcnow()
    row.title, row.body = experiment.title, experiment.body
    row.figure_ids = [str(i) for i in _figure_ids(experiment)]
    row.version_id = db.session.scalar(
        sa.select(CleanResultVersion.id).where(CleanResultVersion.experiment_id == experiment.id,
                                               CleanResultVersion.title == experiment.title,
                                               CleanResultVersion.body == experiment.body)
        .order_by(CleanResultVersion.created_at.desc(), CleanResultVersion.id.desc()).limit(1))
    db.session.flush()
    return row


def promotion_of(experiment: Experiment) -> PromotedResult | None:
    """The experiment's latest promotion (what share links show when it was to `shared`)."""
    return db.session.scalar(sa.select(PromotedResult).where(PromotedResult.experiment_id == experiment.id))


def _figure_ids(experiment: Experiment) -> list[uuid.UUID]:
    return list(db.session.scalars(sa.select(Figure.id).where(Figure.experiment_id == experiment.id)
                                   .order_by(Figure.created_at, Figure.id)))


def result_tag(experiment: Experiment) -> str:
    """A short digest of the result as a promotion would freeze it (title, body, figures):
    the promote form carries the one its page showed, so a save made after the owner read
    the result cannot be promoted unseen."""
    parts = [experiment.title or "", experiment.body or "", *map(str, _figure_ids(experiment))]
    return hashlib.sha256("\x00".join(parts).encode()).hexdigest()[:16]


def edited_since_promotion(experiment: Experiment, promotion: PromotedResult | None) -> bool:
    """The result differs from what its latest promotion froze (title, body or figures)."""
    if promotion is None:
        return False
    return (promotion.title != experiment.title or promotion.body != (experiment.body or "")
            or promotion.figure_ids != [str(i) for i in _figure_ids(experiment)])


def check_promotion(experiment: Experiment, to: str, actor: Actor, metadata: dict) -> None:
    """A promotion made as a plain status move (board, status form, API) meets the same lint
    check as the Promote button; confirming a failing lint is done with that button."""
    if metadata.get("promoted") or not experiment.body:
        return  # promote() checked already; without a result there is nothing to lint
    report = lint(experiment.title, experiment.body)
    if not report.passed:
        raise LintFailed(f"Lint found {len(report.problems)} problem(s): "
                         + "; ".join(f.message for f in report.problems)
                         + " Promote from the experiment page to confirm.", findings=report.as_json()["findings"])


def on_request_promotion(experiment_id, actor: Actor, metadata: dict) -> None:
    """clean_result_drafting → awaiting_promotion: lint ran, the owner's turn is marked."""
    experiment = db.session.get(Experiment, experiment_id)
    if experiment is None:
        return
    if experiment.body:
        post_lint(experiment, Actor.system())
    markers.post_marker(experiment, "epm:awaiting-promotion", Actor.system(),
                        note="The clean result waits for the owner's promotion.")
    db.session.commit()


def on_promote(experiment_id, actor: Actor, metadata: dict) -> None:
    """A promotion made as a plain status move (board, API status) still gets its marker."""
    if (metadata or {}).get("promoted"):
        return
    experiment = db.session.get(Experiment, experiment_id)
    if experiment is None:
        return
    markers.post_marker(experiment, "epm:promoted", actor, note=f"Promoted to {experiment.status}.",
                        metadata={"to": experiment.status, "via": "status move"})
    db.session.commit()


# --- figures ------------------------------------------------------------------------------

@dataclass
class FigureView:
    """A figure ready to show: images as data URLs, SVG/HTML as sanitized markup for a frame."""

    id: uuid.UUID
    kind: str
    title: str
    data_url: str | None = None
    html: str | None = None


def figures(experiment: Experiment, only: list[str] | None = None) -> list[FigureView]:
    """The experiment's figures ready to show; `only`: just these ids (a promotion's)."""
    query = sa.select(Figure).where(Figure.experiment_id == experiment.id).order_by(Figure.created_at, Figure.id)
    if only is not None:
        query = query.where(Figure.id.in_([uuid.UUID(i) for i in only]))
    rows = list(db.session.scalars(query))
    artifact_ids = [r.artifact_id for r in rows if r.artifact_id]
    artifacts = {a.id: a for a in db.session.scalars(sa.select(Artifact).where(Artifact.id.in_(artifact_ids)))} \
        if artifact_ids else {}
    views = []
    for row in rows:
        if row.kind == "image":
            artifact = artifacts.get(row.artifact_id)
            if artifact is None or artifact.content_type not in IMAGE_SIGNATURES:
                continue
            data = base64.b64encode(artifact.content).decode()
            views.append(FigureView(row.id, row.kind, row.title, data_url=f"data:{artifact.content_type};base64,{data}"))
        elif row.content:
            views.append(FigureView(row.id, row.kind, row.title, html=row.content))
    return views


def _clean_figure_title(title) -> str:
    title = " ".join(str(title or "").split())
    if len(title) > 300:
        raise ValidationError("A figure title has at most 300 characters.", field="title")
    return redact(title)


def _image_type(content: bytes) -> str | None:
    return next((kind for kind, magic in IMAGE_SIGNATURES.items() if content.startswith(magic)), None)


def attach_upload(experiment: Experiment, filename: str, content: bytes, actor: Actor, *, title: str = "") -> Figure:
    """A figure from an uploaded file: PNG or JPEG (kept as an artifact) or SVG (sanitized)."""
    if not content:
        raise ValidationError("Choose a PNG, JPEG or SVG file to attach.", field="file")
    if len(content) > FIGURE_MAX_BYTES:
        raise TooLarge(f"The figure is {len(content):,} bytes; the limit is {FIGURE_MAX_BYTES:,}.")
    title = _clean_figure_title(title or filename)
    kind = _image_type(content)
    if kind:
        artifact = Artifact(id=uuid.uuid4(), experiment_id=experiment.id, pod_id=None,
                            name=f"figures/{uuid.uuid4().hex[:8]}-{(filename or 'figure')[-200:]}",
                            content_type=kind, size=len(content),
                            sha256=__import__("hashlib").sha256(content).hexdigest(), content=content)
        db.session.add(artifact)
        db.session.flush()
        figure = _add_figure(experiment, "image", title, actor, artifact_id=artifact.id, content_type=kind)
        artifacts.charge(experiment.id, None, files=1, size=len(content), name=artifact.name)
        return figure
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError:
        text = ""
    if "<svg" in text.lower():
        return attach_markup(experiment, "svg", text, actor, title=title)
    raise ValidationError("Only PNG, JPEG and SVG files can be attached as figures.", field="file")


def attach_markup(experiment: Experiment, kind: str, markup: str, actor: Actor, *, title: str = "") -> Figure:
    """An inline SVG or HTML figure, sanitized with the result policy."""
    if kind not in ("svg", "html_artifact"):
        raise ValidationError("Inline figures are svg or html_artifact.", field="kind")
    if not isinstance(markup, str) or not markup.strip():
        raise ValidationError("The figure is empty.", field="content")
    _check_size(markup, "figure")
    clean = outside_transaction(lambda: sanitize_result_html(
        redact(re.sub(r"<\?xml[^>]*\?>|<!DOCTYPE[^>]*>", "", markup, flags=re.I))))
    if kind == "svg" and "<svg" not in clean:
        raise ValidationError("Nothing of the SVG is left after sanitizing (only a subset of SVG is allowed).",
                              field="content")
    if not clean.strip():
        raise ValidationError("Nothing of the figure is left after sanitizing.", field="content")
    return _add_figure(experiment, kind, _clean_figure_title(title), actor, content=clean,
                       content_type="image/svg+xml" if kind == "svg" else "text/html")


def attach_artifact(experiment: Experiment, artifact_id, actor: Actor, *, title: str = "") -> Figure:
    """A figure from one of the experiment's uploaded artifacts (image, SVG or HTML)."""
    artifact = get_by_id(Artifact, artifact_id, f"#{experiment.number} has no such artifact.")
    if artifact.experiment_id != experiment.id:
        raise NotFound(f"#{experiment.number} has no such artifact.")
    title = title or artifact.name
    if not artifact.readable:
        raise ValidationError(f"{artifact.name} is not ready to use: "
                              f"{artifact.status_note or 'it is still being processed; try again in a minute.'}",
                              field="artifact")
    if artifact.content_type in IMAGE_SIGNATURES:
        return _add_figure(experiment, "image", _clean_figure_title(title), actor, artifact_id=artifact.id,
                           content_type=artifact.content_type)
    text = artifact.content.decode("utf-8", errors="replace")
    if artifact.content_type.startswith("image/svg"):
        return attach_markup(experiment, "svg", text, actor, title=title)
    if artifact.content_type.startswith("text/html"):
        return attach_markup(experiment, "html_artifact", text, actor, title=title)
    raise ValidationError(f"{artifact.name} is {artifact.content_type}; figures are images, SVG or HTML.",
                          field="artifact")


def figure_artifacts(experiment: Experiment) -> list[Artifact]:
    """Artifacts that could become figures."""
    return list(db.session.scalars(sa.select(Artifact).where(
        Artifact.experiment_id == experiment.id, Artifact.status == "ready",
        sa.or_(Artifact.content_type.in_(tuple(IMAGE_SIGNATURES)), Artifact.content_type.like("image/svg%"),
               Artifact.content_type.like("text/html%"))).order_by(Artifact.name)))


def _add_figure(experiment: Experiment, kind: str, title: str, actor: Actor, **fields) -> Figure:
    if kind not in registry.FIGURE_KINDS:
        raise ValidationError(f"Figure kind must be one of: {', '.join(registry.FIGURE_KINDS)}.", field="kind")
    figure = Figure(id=uuid.uuid4(), experiment_id=experiment.id, kind=kind, title=title, **fields)
    db.session.add(figure)
    events.record(experiment, "note", actor, note=f"Figure attached: {title or kind}.",
                  metadata={"figure_id": str(figure.id), "kind": kind})
    return figure


def remove_figure(experiment: Experiment, figure_id, actor: Actor) -> None:
    figure = get_by_id(Figure, figure_id, "That figure no longer exists.")
    if figure.experiment_id != experiment.id:
        raise NotFound("That figure no longer exists.")
    db.session.delete(figure)
    events.record(experiment, "note", actor, note=f"Figure removed: {figure.title or figure.kind}.")


# --- page context -------------------------------------------------------------------------

def page_context(experiment: Experiment) -> dict:
    """Everything the experiment page's clean-result section shows."""
    promotion = promotion_of(experiment)
    attached = figures(experiment)
    return {"lint_report": report_for(experiment), "result_versions": versions(experiment),
            "result_figures": attached, "figure_artifacts": figure_artifacts(experiment),
            "result_summary": summary(experiment, attached),
            "confidence": confidence_of(experiment.title),
            "result_title": title_without_confidence(experiment.title), "skeleton": SKELETON,
            "can_promote": experiment.status == "awaiting_promotion" and bool(experiment.body),
            "promotion": promotion, "edited_since_promotion": edited_since_promotion(experiment, promotion),
            # Promoting again in place: the experiment still has the status it was promoted to.
            "can_promote_again": bool(promotion and experiment.body and experiment.status == promotion.promoted_to),
            "result_tag": result_tag(experiment) if experiment.body else None}


# A starting point for the editor: the three parts of SPEC §8.1.
SKELETON = """<section id="tldr">
  <h2>TL;DR</h2>
  <ul>
    <li><strong>Motivation:</strong> …</li>
    <li><strong>What I ran:</strong> …</li>
    <li><strong>Results:</strong> … (<a href="#figure">figure</a>)</li>
    <li><strong>Next steps:</strong> …</li>
  </ul>
</section>
<figure id="figure">
  <svg viewBox="0 0 320 200" role="img" aria-label="…">
    <circle cx="60" cy="100" r="5"><title>…</title></circle>
  </svg>
  <figcaption>…</figcaption>
</figure>
<details>
  <summary>Experimental design</summary>
  <p>…</p>
</details>
"""


def result_list(limit: int = 200, project_id=None) -> list[dict]:
    """Experiments with a clean result, newest first, for the /results page (two queries);
    only one project's when `project_id` is given."""
    query = sa.select(Experiment).where(Experiment.has_clean_result.is_(True))
    if project_id is not None:
        query = query.where(Experiment.project_id == project_id)
    rows = list(db.session.scalars(query.order_by(Experiment.updated_at.desc()).limit(limit)))
    return [{"experiment": e, "title": title_without_confidence(e.title), "confidence": confidence_of(e.title),
             "excerpt": excerpt(e.body)} for e in rows]
