"""Projects (SPEC §11.1, §11.4): the list, the new-project form, a project's page with its
edit and status forms, its narrative's versions, and the project's share links. Views are
thin; services.research.projects and .narratives do the work."""
from __future__ import annotations

from flask import Blueprint, make_response, redirect, render_template, request, url_for

from blueprints import access
from blueprints._actions import perform, stash_for, take_stash
from models import db
from services.core import registry
from services.research import narratives, projects
from services.results import shares

bp = Blueprint("projects", __name__)

FORM_FIELDS = ("title", "slug", "question", "summary_md")
_SHARE_STASH = "project-share"


def _form_of(project=None) -> dict:
    if project is None:
        return {name: "" for name in FORM_FIELDS}
    return {name: getattr(project, name) or "" for name in FORM_FIELDS}


def _typed() -> dict:
    return {name: request.form.get(name, "") for name in FORM_FIELDS}


@bp.get("/projects")
@access.owner
def index():
    """Every project, active first; `?status=` shows one status only."""
    status = request.args.get("status", "")
    known = status in registry.PROJECT_STATUSES
    rows = projects.list_projects(status if known else None) if known or not status else []
    return render_template("projects/index.html", projects=rows, counts=projects.counts(), status=status,
                           unknown_status=bool(status) and not known, statuses=registry.PROJECT_STATUSES)


@bp.route("/projects/new", methods=["GET", "POST"])
@access.owner
def new():
    """The new-project form; a refusal re-shows it with the message and what was typed (422)."""
    if request.method == "GET":
        return render_template("projects/new.html", form=_form_of(), error=None)
    form = _typed()
    created = {}

    def create():
        created["project"] = projects.create_project(form, access.actor())

    def done():
        if "project" in created:
            return redirect(url_for("projects.detail", slug=created["project"].slug), code=303)
        return redirect(url_for("projects.index"), code=303)  # the repeat of a post that already created it

    return perform(create, done=done,
                   refused=lambda exc: (render_template("projects/new.html", form=form, error=exc), 422))


def _page(project, *, status_code: int = 200, **extra):
    """The project page, with what the last share-link post stashed for it (once)."""
    stashed = take_stash(f"{_SHARE_STASH}:{project.id}")
    new_share = None
    links = shares.list_links(project.id)
    if stashed.get("link_id"):
        link = next((row for row in links if str(row.id) == stashed["link_id"]), None)
        new_share = {"link": link, "url": stashed["url"]} if link else None
    context = {"view": projects.page(project), "project": project, "form": _form_of(project), "edit_error": None,
               "status_error": None, "statuses": registry.PROJECT_STATUSES,
               "narrative": narratives.shown(narratives.published(project.id)),
               "latest_narrative": narratives.latest(project), "share_links": links, "new_share": new_share,
               "share_error": stashed.get("error"), "share_form": stashed.get("form") or {}, **extra}
    response = make_response(render_template("projects/detail.html", **context), status_code)
    response.headers["Cache-Control"] = "no-store"  # it may carry a new share link's secret
    return response


@bp.get("/p/<slug>")
@access.owner
def detail(slug: str):
    """A project: its question and summary, research questions built from its beliefs, its
    experiments results first, beliefs by status, literature, the narrative, share links."""
    return _page(projects.get_project(slug))


@bp.post("/p/<slug>/edit")
@access.owner
def edit(slug: str):
    """Save the edited title, slug, question and summary; a refusal re-shows the page (422)."""
    project = projects.get_project(slug)
    form = _typed()
    return perform(lambda: projects.update_project(project, form, access.actor()),
                   refused=lambda exc: _page(projects.get_project(slug), status_code=422, form=form,
                                             edit_error=exc),
                   done=lambda: redirect(url_for("projects.detail", slug=project.slug), code=303))


@bp.post("/p/<slug>/status")
@access.owner
def change_status(slug: str):
    """Pause, complete, archive or reopen; archiving needs the confirmation box."""
    project = projects.get_project(slug)
    return perform(lambda: projects.update_project(project, {"status": request.form.get("status", "")},
                                                   access.actor(),
                                                   confirm_archive=request.form.get("confirm_archive") == "1"),
                   refused=lambda exc: _page(projects.get_project(slug), status_code=422, status_error=exc),
                   done=lambda: redirect(url_for("projects.detail", slug=slug), code=303))


# --- the narrative ------------------------------------------------------------------------

def _narrative_page(project, *, status_code: int = 200, error=None, draft: str | None = None):
    rows = narratives.versions(project)
    if draft is None:
        draft = rows[0].body_md if rows else ""
    return render_template("projects/narrative.html", project=project, versions=rows, draft=draft, error=error,
                           published=narratives.shown(next((r for r in rows if r.status == "published"), None))
                           ), status_code


@bp.get("/p/<slug>/narrative")
@access.owner
def narrative(slug: str):
    """The narrative's versions and the editor (it starts from the newest version)."""
    return _narrative_page(projects.get_project(slug))


@bp.post("/p/<slug>/narrative")
@access.owner
def save_narrative(slug: str):
    """Save the text as a new draft version (once per form key)."""
    project = projects.get_project(slug)
    body = request.form.get("body_md", "")
    return perform(lambda: narratives.save_draft(project, body, access.actor()),
                   refused=lambda exc: _narrative_page(projects.get_project(slug), status_code=422, error=exc,
                                                       draft=body),
                   done=lambda: redirect(url_for("projects.narrative", slug=slug), code=303))


@bp.get("/p/<slug>/narrative/<int:version>")
@access.owner
def narrative_version(slug: str, version: int):
    """One version of the narrative, rendered, to read or publish."""
    project = projects.get_project(slug)
    return render_template("projects/narrative_version.html", project=project,
                           shown=narratives.shown(narratives.get_version(project, version)))


@bp.post("/p/<slug>/narrative/<int:version>/publish")
@access.owner
def publish_narrative(slug: str, version: int):
    """Publish this version; the one published before is archived."""
    project = projects.get_project(slug)
    return perform(lambda: narratives.publish(project, version, access.actor()),
                   done=lambda: redirect(url_for("projects.detail", slug=slug) + "#narrative", code=303))


# --- sharing ------------------------------------------------------------------------------

@bp.post("/p/<slug>/share-links")
@access.owner
def create_share_link(slug: str):
    """Create a share link for this project; the redirect shows its URL once (only a hash is
    kept). A reload or a second tap with the same form key creates no second link."""
    project = projects.get_project(slug)
    form = request.form
    stash = f"{_SHARE_STASH}:{project.id}"

    def create():
        link, token = shares.create_link(scope="project", project=project, label=form.get("label", ""),
                                         expires_in_days=form.get("expires_in_days"))
        db.session.flush()
        stash_for(stash, {"link_id": str(link.id), "url": url_for("share.view", token=token, _external=True)})

    def refused(exc):
        stash_for(stash, {"error": exc.message, "form": {k: v for k, v in form.items()
                                                         if k in ("label", "expires_in_days")}})
        return _to_share_links(slug)

    return perform(create, refused=refused, done=lambda: _to_share_links(slug))


def _to_share_links(slug: str):
    return redirect(url_for("projects.detail", slug=slug) + "#share", code=303)
