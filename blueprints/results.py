"""The clean result on the experiment page: editor with live preview, versions, figures,
promotion and follow-ups (SPEC §8.1–8.4, §8.6). Views are thin; services.results does the work."""
from __future__ import annotations

from flask import Blueprint, make_response, redirect, render_template, request, url_for
from markupsafe import Markup

from blueprints import access, security_headers
from blueprints._htmx import is_fragment_request, render
from models import db
from services import experiments, follow_ups, lifecycle, results
from services.errors import NotFound, SaganError
from services.sanitize import css_hashes

bp = Blueprint("results", __name__)


def result_frame(body_html: str | None, label: str = "Clean result", extra_class: str = "") -> Markup:
    """A sanitized result in its sandboxed srcdoc frame; this page's CSP allows its styles."""
    srcdoc = render_template("results/_frame_document.html", body=body_html or "",
                             frame_policy=security_headers.FRAME_POLICY)
    security_headers.allow_styles(css_hashes(srcdoc))
    return Markup(render_template("results/_frame.html", srcdoc=srcdoc, label=label, extra_class=extra_class))


def init_app(app) -> None:
    app.add_template_global(result_frame)


def _detail(experiment, status: int = 200, **extra):
    from blueprints.experiments import _detail_context
    return make_response(render_template("experiments/detail.html", **_detail_context(experiment, **extra)), status)


def _back(number: int, anchor: str = "clean-result"):
    return redirect(url_for("experiments.detail", number=number) + f"#{anchor}", code=303)


@bp.post("/experiments/<int:number>/clean-result")
@access.owner
def save(number: int):
    """Save the edited clean result (sanitized) as a new version."""
    experiment = experiments.get_experiment(number)
    html, title = request.form.get("html", ""), request.form.get("title")
    try:
        results.save_clean_result(experiment, html, access.actor(), title=title)
    except SaganError as exc:
        db.session.rollback()
        experiment = experiments.get_experiment(number)
        return _detail(experiment, result_error=exc.message, draft_html=html, draft_title=title)
    db.session.commit()
    return _back(number)


@bp.post("/experiments/<int:number>/clean-result/preview")
@access.owner
def preview(number: int):
    """Sanitize and lint the editor's text as it is typed; the preview frame loads it."""
    experiment = experiments.get_experiment(number)
    html, title = request.form.get("html", ""), request.form.get("title")
    context = {"experiment": experiment, "preview_error": None, "preview_url": None, "preview_report": None}
    try:
        key, _body, report = results.store_draft(experiment, html, title)
    except SaganError as exc:
        context["preview_error"] = exc.message
    else:
        context.update(preview_url=url_for("results.draft", number=number, key=key), preview_report=report)
    if is_fragment_request():
        return render_template("results/_preview.html", **context)
    return _detail(experiment, draft_html=html, draft_title=title, **{k: v for k, v in context.items()
                                                                       if k != "experiment"})


@bp.get("/experiments/<int:number>/clean-result/drafts/<key>")
@access.owner
def draft(number: int, key: str):
    """An unsaved preview as its own sandboxed document (framed by the editor only)."""
    experiment = experiments.get_experiment(number)
    body = results.load_draft(experiment, key)
    response = make_response(render_template("results/_frame_document.html", body=body,
                                             frame_policy=security_headers.FRAME_POLICY))
    response.headers["Content-Security-Policy"] = security_headers.PREVIEW_FRAME_POLICY
    response.headers["X-Frame-Options"] = "SAMEORIGIN"
    response.headers["Cache-Control"] = "no-store"
    return response


@bp.get("/experiments/<int:number>/clean-result/versions/<int:version>")
@access.owner
def version(number: int, version: int):
    """One saved version of the clean result, to read or restore."""
    experiment = experiments.get_experiment(number)
    row = results.get_version(experiment, version)
    return render_template("results/version.html", experiment=experiment, row=row, number=version,
                           latest=results.version_count(experiment))


@bp.post("/experiments/<int:number>/clean-result/versions/<int:version>/restore")
@access.owner
def restore(number: int, version: int):
    """Save an earlier version again as the newest one."""
    experiment = experiments.get_experiment(number)
    row = results.get_version(experiment, version)
    results.save_clean_result(experiment, row.body, access.actor(), title=row.title)
    db.session.commit()
    return _back(number)


@bp.post("/experiments/<int:number>/promote")
@access.owner
def promote(number: int):
    """Promote the result to shared or completed; lint failures need the confirm box."""
    experiment = experiments.get_experiment(number)
    try:
        effects = results.promote(experiment, request.form.get("to", ""), access.actor(),
                                  confirm_lint=request.form.get("confirm_lint") == "1",
                                  note=request.form.get("note") or None,
                                  expected_status=request.form.get("expected") or None)
    except SaganError as exc:
        db.session.rollback()
        experiment = experiments.get_experiment(number)
        return _detail(experiment, promote_error=exc.message)
    db.session.commit()
    lifecycle.run_side_effects(effects)
    return _back(number)


@bp.post("/experiments/<int:number>/figures")
@access.owner
def attach_figure(number: int):
    """Attach a figure: an uploaded PNG/JPEG/SVG, or one of the experiment's artifacts."""
    experiment = experiments.get_experiment(number)
    upload = request.files.get("file")
    title = request.form.get("title", "")
    try:
        if upload is not None and upload.filename:
            results.attach_upload(experiment, upload.filename, upload.read(results.FIGURE_MAX_BYTES + 1),
                                  access.actor(), title=title)
        elif request.form.get("artifact"):
            results.attach_artifact(experiment, request.form["artifact"], access.actor(), title=title)
        else:
            from services.errors import ValidationError
            raise ValidationError("Choose a file to upload or an artifact.", field="file")
    except SaganError as exc:
        db.session.rollback()
        experiment = experiments.get_experiment(number)
        return _detail(experiment, figure_error=exc.message)
    db.session.commit()
    return _back(number)


@bp.post("/experiments/<int:number>/figures/<figure_id>/delete")
@access.owner
def remove_figure(number: int, figure_id: str):
    """Remove a figure from the result."""
    experiment = experiments.get_experiment(number)
    try:
        results.remove_figure(experiment, figure_id, access.actor())
    except NotFound:
        db.session.rollback()
        return _back(number)  # already gone: the page shows what is there
    db.session.commit()
    return _back(number)


@bp.post("/experiments/<int:number>/follow-ups")
@access.owner
def create_follow_up(number: int):
    """The owner creates a child experiment from this one."""
    parent = experiments.get_experiment(number)
    data = {"title": request.form.get("title", ""), "hypothesis": request.form.get("hypothesis", "")}
    try:
        follow_ups.create_follow_up(parent, data, access.actor(),
                                    auto_approve=request.form.get("auto_approve") == "1")
    except SaganError as exc:
        db.session.rollback()
        parent = experiments.get_experiment(number)
        return _detail(parent, follow_up_error=exc.message, follow_up_form=data)
    db.session.commit()
    if is_fragment_request():
        return render("experiments/detail.html", "results/_follow_ups.html", experiment=parent,
                      children=follow_ups.children(parent), follow_up_error=None, follow_up_form=None)
    return _back(number, "follow-ups")


@bp.get("/results")
@access.owner
def index():
    """Every clean result, newest first: title, confidence, status, a one-line excerpt."""
    return render_template("results/index.html", items=results.result_list())
