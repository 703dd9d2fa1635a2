"""What a member reads and writes in their projects (SPEC §13), on pages of their own under
/m/: a project, an experiment, a shared result, with comments and proposals. Each view asks
services/core/permissions.py for its record and answers 404 outside the member's projects,
as if the record did not exist. The owner, who has the full pages, is sent there."""
from __future__ import annotations

from flask import Blueprint, abort, redirect, render_template, request, url_for
from flask_login import current_user

from blueprints import access
from blueprints._actions import perform
from services.core import permissions, registry
from services.core.actors import Actor
from services.core.errors import Conflict, NotFound, ValidationError
from services.core import sanitize
from services.day import todos, weekly_review
from services.dispatch import metrics
from services.planning import discussion
from services.research import beliefs, links, literature, member_reads, narratives, projects
from services.results import results, shares
from services.results.result_lint import confidence_of, title_without_confidence
from services.workflow import experiments, runs

bp = Blueprint("member_pages", __name__)


def _member_project(slug: str, action: str):
    """The project `slug` if the signed-in member may do `action` there, else 404: another
    project's page answers as one that does not exist (permissions.can decides)."""
    project = projects.find(slug)
    if project is None or not permissions.can(current_user._get_current_object(), action, project):
        abort(404)
    return project


@bp.get("/m/<slug>")
@access.allow("read_project")
def project(slug: str):
    """A member's read-only view of one of their projects: its question and summary, the
    published narrative, and — as the role allows — its experiments, beliefs and papers.
    No forms, no costs, no runs, no agent logs. The owner has the full page."""
    found = _member_project(slug, "read_project")
    account = current_user._get_current_object()
    if account.is_owner:
        return redirect(url_for("projects.detail", slug=slug))
    published = narratives.shown(narratives.published(found.id)) \
        if permissions.can(account, "read_narrative", found) else None
    return _project_page(found, published)


def _project_page(found, published, *, proposal_error=None, proposal=None, todo_error=None, todo_form=None,
                  paper_error=None, paper_form=None, status=200):
    account = current_user._get_current_object()
    shared = projects.shared_items(shares.shared_in_project(found.id)) \
        if permissions.can(account, "read_result", found) else []
    return render_template("member_pages/project.html", page=projects.page(found), narrative=published,
                           shared=shared,
                           may={action: permissions.can(account, action, found)
                                for action in ("read_experiment", "read_belief", "read_literature",
                                               "propose_experiment", "propose_todo", "propose_literature")},
                           proposal_error=proposal_error, proposal=proposal or {}, todo_error=todo_error,
                           todo_form=todo_form or {}, paper_error=paper_error, paper_form=paper_form or {},
                           paper_note=request.args.get("paper")), status


@bp.post("/m/<slug>/experiments")
@access.allow("propose_experiment")
def propose_experiment(slug: str):
    """A collaborator proposes an experiment in their project: it enters the owner's queue in
    `proposed`, as theirs. Only a title and a hypothesis: the plan, the pods and the money are
    the owner's to decide."""
    found = _member_project(slug, "propose_experiment")
    proposal = {"title": request.form.get("title", ""), "hypothesis": request.form.get("hypothesis", "")}
    account = current_user._get_current_object()
    made = {}

    def make():
        made["experiment"] = experiments.propose_for_member(proposal, found.id, account.id, Actor.member(account))

    return perform(make, refusals=(ValidationError,),
                   refused=lambda exc: _project_page(found, None, proposal_error=exc.message, proposal=proposal,
                                                     status=400),
                   done=lambda: redirect(url_for("member_pages.project", slug=slug) + "#experiments", code=303))


def _member_experiment(slug: str, number: int, action: str):
    """The project and experiment `number` if it is in that project and the member may do
    `action` on it, else 404 — the same for another project's number and for none at all."""
    found = _member_project(slug, action)
    try:
        record = experiments.get_experiment(number)
    except NotFound:
        abort(404)
    if record.project_id != found.id or not permissions.can(current_user._get_current_object(), action, record):
        abort(404)
    return found, record


def _experiment_page(found, record, *, comment_error=None, draft="", link_error=None, link_form=None,
                     status=200):
    account = current_user._get_current_object()
    promotion = results.promotion_of(record) if permissions.can(account, "read_result", record) else None
    # The promoted result's charts and files: the runs it was promoted with, nothing later.
    charts = metrics.page_context(record, pods_until=promotion.promoted_at) if promotion else {}
    files = member_reads.artifact_names(record, promotion) if promotion else []
    # Agent runs only when the owner shared this experiment's logs (off by default).
    shared_runs = runs.runs_for_experiment(record.id)[:100] \
        if record.agent_logs_shared and permissions.can(account, "read_shared_agent_logs", record) else []
    return render_template("member_pages/experiment.html", project=found, experiment=record,
                           question=results.original_question(record), promotion=promotion, files=files, shared_runs=shared_runs,
                           metrics_data_url=url_for("member_research.chart_data", slug=found.slug,
                                                    number=record.number),
                           metrics_refresh=None, **charts,
                           comments=discussion.thread("experiment", record.id).comments,
                           may_comment=permissions.can(account, "comment", record),
                           comment_error=comment_error, draft=draft,
                           member_links=links.member_links_of(account, "experiment", record.id),
                           may_link=permissions.can(account, "propose_link", record), link_kinds=registry.LINK_KINDS,
                           link_error=link_error, link_form=link_form or {}), status


@bp.get("/m/<slug>/experiments/<int:number>")
@access.allow("read_experiment")
def experiment(slug: str, number: int):
    """One experiment of a member's project: what it asks, where it stands, its promoted
    result and its discussion. Never its runs, costs or agent logs."""
    if current_user.is_owner:
        return redirect(url_for("experiments.detail", number=number))
    found, record = _member_experiment(slug, number, "read_experiment")
    return _experiment_page(found, record)


@bp.post("/m/<slug>/experiments/<int:number>/comments")
@access.allow("comment")
def comment(slug: str, number: int):
    """A member's comment on an experiment of their project, under their own name (the
    timeline's actor is the member). An @claude in it asks no one: members start no runs."""
    found, record = _member_experiment(slug, number, "read_experiment")
    if not permissions.can(current_user._get_current_object(), "comment", record):
        abort(404)
    body = request.form.get("body", "")
    return perform(lambda: discussion.post_comment("experiment", record, body,
                                                   Actor.member(current_user._get_current_object())),
                   refused=lambda exc: _experiment_page(found, record, comment_error=exc.message, draft=body,
                                                        status=400),
                   refusals=(ValidationError,),
                   done=lambda: redirect(url_for("member_pages.experiment", slug=slug, number=number) + "#discussion",
                                         code=303))


@bp.post("/m/<slug>/experiments/<int:number>/links")
@access.allow("propose_link")
def link_experiment(slug: str, number: int):
    """A collaborator links an experiment of their project to another record of it (a belief
    it tests, a paper it builds on), as theirs. A record out of their reach is refused with the
    sentence one that does not exist gets."""
    found, record = _member_experiment(slug, number, "read_experiment")
    account = current_user._get_current_object()
    form = {"kind": request.form.get("kind", ""), "target": request.form.get("target", ""),
            "note": request.form.get("note", "")}
    return perform(lambda: links.create_member_link(account, f"experiment:{record.id}", form["kind"], form["target"],
                                                    form["note"]),
                   refusals=(ValidationError, NotFound, Conflict),
                   refused=lambda exc: _experiment_page(found, record, link_error=exc.message, link_form=form,
                                                        status=409 if isinstance(exc, Conflict) else
                                                        404 if isinstance(exc, NotFound) else 400),
                   done=lambda: redirect(url_for("member_pages.experiment", slug=slug, number=number) + "#links",
                                         code=303))


@bp.post("/m/<slug>/todos")
@access.allow("propose_todo")
def propose_todo(slug: str):
    """A collaborator suggests a todo for their project: it lands in the owner's inbox as theirs."""
    found = _member_project(slug, "propose_todo")
    form = {"title": request.form.get("title", ""), "body_md": request.form.get("body_md", "")}
    account = current_user._get_current_object()
    return perform(lambda: todos.propose_for_member(form, found.slug, account.id, Actor.member(account)),
                   refusals=(ValidationError,),
                   refused=lambda exc: _project_page(found, None, todo_error=exc.message, todo_form=form, status=400),
                   done=lambda: redirect(url_for("member_pages.project", slug=slug, suggested=1) + "#todo", code=303))


@bp.post("/m/<slug>/literature")
@access.allow("propose_literature")
def propose_literature(slug: str):
    """A collaborator adds a paper to their project's library, as theirs."""
    found = _member_project(slug, "propose_literature")
    form = {"title": request.form.get("title", ""), "authors": request.form.get("authors", ""),
            "year": request.form.get("year", ""), "url": request.form.get("url", "")}
    account = current_user._get_current_object()
    added = {}

    def make():
        added["result"] = literature.suggest_for_member(form, found.id, account.id)

    return perform(make, refusals=(ValidationError,),
                   refused=lambda exc: _project_page(found, None, paper_error=exc.message, paper_form=form, status=400),
                   done=lambda: redirect(url_for("member_pages.project", slug=slug,
                                                 paper="added" if added.get("result") is None or added["result"].created
                                                 else "already") + "#literature", code=303))


def _shared_result(slug: str, number: int):
    """The project and its result `number` as promoted to `shared`, if the member reads
    results there; else 404, as for a result that was never shared."""
    found = _member_project(slug, "read_result")
    shared = shares.shared_in_project(found.id, number)
    if not shared:
        abort(404)
    return found, shared[0]


def _result_page(found, shared, *, comment_error=None, draft="", status=200):
    account = current_user._get_current_object()
    promotion = shared.promotion
    return render_template("member_pages/result.html", project=found, experiment=shared.experiment,
                           promotion=promotion, result_title=title_without_confidence(promotion.title),
                           confidence=confidence_of(promotion.title),
                           comments=discussion.thread("experiment", shared.experiment.id).comments,
                           may_comment=permissions.can(account, "comment", shared.experiment),
                           comment_error=comment_error, draft=draft), status


@bp.get("/m/<slug>/results/<int:number>")
@access.allow("read_result")
def result(slug: str, number: int):
    """A result of a member's project as it was shared (never a draft), with its discussion:
    what a mentor's account reads."""
    if current_user.is_owner:
        return redirect(url_for("experiments.detail", number=number))
    found, shared = _shared_result(slug, number)
    return _result_page(found, shared)


@bp.post("/m/<slug>/results/<int:number>/comments")
@access.allow("comment")
def comment_on_result(slug: str, number: int):
    """A member's comment on a shared result of their project, under their own name."""
    found, shared = _shared_result(slug, number)
    if not permissions.can(current_user._get_current_object(), "comment", shared.experiment):
        abort(404)
    body = request.form.get("body", "")
    return perform(lambda: discussion.post_comment("experiment", shared.experiment, body,
                                                   Actor.member(current_user._get_current_object())),
                   refused=lambda exc: _result_page(found, shared, comment_error=exc.message, draft=body, status=400),
                   refusals=(ValidationError,),
                   done=lambda: redirect(url_for("member_pages.result", slug=slug, number=number) + "#discussion",
                                         code=303))


# --- what waits on a member, and the reviews shown to mentors ----------------------------------

def _assigned_todo(number: int):
    """The todo `number` if the owner assigned it to the signed-in collaborator, in a project
    they still work on; else 404, the same for another's todo, another project's and none."""
    try:
        return todos.assigned_to(current_user._get_current_object(), number)
    except NotFound:
        abort(404)


@bp.get("/m/todos/<int:number>")
@access.allow(todos.WORK_ON_ASSIGNED)
def assigned_todo(number: int):
    """A todo the owner assigned to this collaborator: its title, notes, project and priority,
    and one action, done. The owner has the full todo page."""
    if current_user.is_owner:
        return redirect(url_for("todos.detail", number=number))
    todo = _assigned_todo(number)
    return render_template("member_pages/todo.html", todo=todo, project=beliefs.projects_by_id([todo.project_id]).get(todo.project_id),
                           closed=registry.TODO_CLOSED_STATUSES)


@bp.post("/m/todos/<int:number>/done")
@access.allow(todos.WORK_ON_ASSIGNED)
def finish_assigned_todo(number: int):
    """The assigned collaborator marks their todo done; it leaves their "Waiting on you"."""
    todo = _assigned_todo(number)
    return perform(lambda: todos.mark_done_by_member(todo, Actor.member(current_user._get_current_object())),
                   keyed=False, done=lambda: redirect(url_for("members.home") + "#waiting", code=303))


@bp.get("/m/reviews/<key>")
@access.allow("read_shown_review")
def shown_review(key: str):
    """A weekly review the owner showed to mentor accounts, as the mentor update: the published
    version only, no spend, `#N` plain (a review spans projects the mentor may not read).
    Not shown, not published or not there: 404 alike."""
    if current_user.is_owner:
        return redirect(url_for("reviews.detail", key=key))
    try:
        review, version, body_html = weekly_review.mentor_update_shown(key)
    except NotFound:
        abort(404)
    body_html = sanitize.relink_experiment_refs(body_html, lambda number: None)
    return render_template("member_pages/review.html", review=review, version=version, body_html=body_html,
                           groups=version.questions or [], week_start=weekly_review.week_start(review))
