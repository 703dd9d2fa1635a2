"""The clean result on the experiment page: editor with live preview, versions, figures,
promotion and follow-ups (SPEC §8.1–8.4, §8.6). Views are thin; services.results.results does the work."""
from __future__ import annotations

from flask import Blueprint, make_response, render_template, request, url_for
from markupsafe import Markup

from blueprints import access
from blueprints._actions import perform, stash_for
from blueprints._htmx import fragment_or_page
from blueprints.experiment_page import back, page_form, refuse
from front import security_headers
from services.core.errors import NotFound, SaganError, ValidationError
from services.core.sanitize import css_hashes
from services.planning import follow_ups
from services.research import projects
from services.results import results
from services.workflow import experiments

bp = Blueprint("results", __name__)


def result_frame(body_html: str | None, label: str = "Clean result", extra_class: str = "",
                 paper: bool = False) -> Markup:
    """A sanitized result in its sandboxed srcdoc frame; this page's CSP allows its styles.
    `paper`: a figure, drawn on white in either theme (charts are drawn for a light page, and
    a transparent one would put its dark strokes on the dark frame)."""
    srcdoc = render_template("results/_frame_document.html", body=body_html or "", paper=paper,
                             light_only=results.styled_for_light_only(body_html),
                             frame_policy=security_headers.FRAME_POLICY)
    security_headers.allow_styles(css_hashes(srcdoc))
    return Markup(render_template("results/_frame.html", srcdoc=srcdoc, label=label, extra_class=extra_class))


def init_app(app) -> None:
    app.add_template_global(result_frame)


def _back(number: int, anchor: str = "clean-result"):
    return back(number, anchor)


@bp.post("/experiments/<int:number>/clean-result")
@access.owner
def save(number: int):
    """Save the edited clean result (sanitized) as a new version."""
    experiment = experiments.get_experiment(number)
    html, title = request.form.get("html", ""), request.form.get("title")
    return page_form(number, "result", lambda: results.save_clean_result(experiment, html, access.actor(), title=title),
                     anchor="clean-result", draft_html=html, draft_title=title)


@bp.post("/experiments/<int:number>/clean-result/preview")
@access.owner
def preview(number: int):
    """Sanitize and lint the editor's text as it is typed; the preview frame loads it."""
    experiment = experiments.get_experiment(number)
    html, title = request.form.get("html", ""), request.form.get("title")
    context = {"preview_error": None, "preview_url": None, "preview_report": None}
    try:
        key, _body, report = results.store_draft(experiment, html, title)
    except SaganError as exc:
        context["preview_error"] = exc.message
    else:
        context.update(preview_url=url_for("results.draft", number=number, key=key), preview_report=report)

    def page():
        # Without JavaScript the preview is a post: show it on the page, after a redirect.
        if context["preview_error"]:
            return refuse(experiment, "preview", context["preview_error"], draft_html=html, draft_title=title)
        stash_for(f"experiment:{number}", {"drafts": {"draft_html": html, "draft_title": title,
                                                      "show_preview": True}})
        return _back(number)

    return fragment_or_page(lambda: render_template("results/_preview.html", experiment=experiment, **context),
                            page)


@bp.get("/experiments/<int:number>/clean-result/drafts/<key>")
@access.owner
def draft(number: int, key: str):
    """An unsaved preview as its own sandboxed document (framed by the editor only)."""
    experiment = experiments.get_experiment(number)
    body = results.load_draft(experiment, key)
    response = make_response(render_template("results/_frame_document.html", body=body,
                                             light_only=results.styled_for_light_only(body),
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
    """Save an earlier version again as the newest one (once per form key)."""
    experiment = experiments.get_experiment(number)
    row = results.get_version(experiment, version)
    return page_form(number, "result", lambda: results.save_clean_result(experiment, row.body, access.actor(),
                                                                          title=row.title),
                     anchor="clean-result")


@bp.post("/experiments/<int:number>/promote")
@access.owner
def promote(number: int):
    """Promote the result to shared or completed (or again, in place); lint failures need the
    confirm box, and a result saved since the page was read is refused."""
    experiment = experiments.get_experiment(number)
    return page_form(number, "promote", lambda: results.promote(
        experiment, request.form.get("to", ""), access.actor(), confirm_lint=request.form.get("confirm_lint") == "1",
        note=request.form.get("note") or None, expected_status=request.form.get("expected") or None,
        expected_result=request.form.get("result_tag") or None),
        anchor="clean-result")


@bp.post("/experiments/<int:number>/figures")
@access.owner
def attach_figure(number: int):
    """Attach a figure: an uploaded PNG/JPEG/SVG, or one of the experiment's artifacts."""
    experiment = experiments.get_experiment(number)
    upload = request.files.get("file")
    title = request.form.get("title", "")

    def attach():
        if upload is not None and upload.filename:
            results.attach_upload(experiment, upload.filename, upload.read(results.FIGURE_MAX_BYTES + 1),
                                  access.actor(), title=title)
        elif request.form.get("artifact"):
            results.attach_artifact(experiment, request.form["artifact"], access.actor(), title=title)
        else:
            raise ValidationError("Choose a file to upload or an artifact.", field="file")

    return page_form(number, "figure", attach, anchor="clean-result")


@bp.post("/experiments/<int:number>/figures/<figure_id>/delete")
@access.owner
def remove_figure(number: int, figure_id: str):
    """Remove a figure from the result; one already gone is not an error (the page shows
    what is there)."""
    experiment = experiments.get_experiment(number)
    return perform(lambda: results.remove_figure(experiment, figure_id, access.actor()),
                   refused=lambda exc: _back(number) if isinstance(exc, NotFound)
                   else refuse(experiments.get_experiment(number), "figure", exc),
                   done=lambda: _back(number))


@bp.post("/experiments/<int:number>/follow-ups")
@access.owner
def create_follow_up(number: int):
    """The owner creates a child experiment from this one (once per form key)."""
    parent = experiments.get_experiment(number)
    data = {"title": request.form.get("title", ""), "hypothesis": request.form.get("hypothesis", "")}

    def follow_up_list():
        current = experiments.get_experiment(number)
        return render_template("results/_follow_ups.html", experiment=current, errors={},
                               children=follow_ups.children(current), follow_up_form=None)

    return perform(lambda: follow_ups.create_follow_up(parent, data, access.actor(),
                                                       auto_approve=request.form.get("auto_approve") == "1"),
                   refused=lambda exc: refuse(experiments.get_experiment(number), "follow_up", exc,
                                              follow_up_form=data),
                   done=lambda: fragment_or_page(follow_up_list, lambda: _back(number, "follow-ups")))


@bp.get("/results")
@access.owner
def index():
    """Every clean result, newest first: title, confidence, status, a one-line excerpt; only
    one project's with `?project=<slug>` (none for a slug that names no project)."""
    slug = (request.args.get("project") or "").strip()
    project = projects.find(slug) if slug else None
    items = results.result_list(project_id=project.id if project else None) if project or not slug else []
    return render_template("results/index.html", items=items, projects=projects.choices(), project_filter=slug)
