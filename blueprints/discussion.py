"""Discussion threads on experiment, run and literature item pages (SPEC §8.8, §11.3), through htmx.

Each view answers htmx with the thread's section (templates/discussion/_section.html)
and plain browsers with a redirect to the page's #discussion. The run and library item
pages include the same section with one line, so this blueprint owns every discussion route.
"""
from __future__ import annotations

from flask import Blueprint, redirect, render_template, request, url_for

from blueprints import access
from blueprints._actions import perform
from blueprints._htmx import fragment_or_page
from services.core.errors import ValidationError
from services.planning import discussion
from services.research import literature
from services.workflow import experiments, jobs, runs

bp = Blueprint("discussion", __name__)


def init_app(app) -> None:
    @app.template_global()
    def discussion_thread(entity_kind: str, entity):
        return discussion.thread(entity_kind, entity.id)

    app.add_template_global(discussion_url)


def discussion_url(entity_kind: str, entity, what: str = "post") -> str:
    """Where a thread's comments are posted (`post`) or polled (`thread`)."""
    if entity_kind == "experiment":
        return url_for(f"discussion.{what}_experiment" if what == "post" else "discussion.experiment_thread",
                       number=entity.number)
    if entity_kind == "literature":
        return url_for(f"discussion.{what}_literature" if what == "post" else "discussion.literature_thread",
                       item_id=entity.id)
    return url_for(f"discussion.{what}_run" if what == "post" else "discussion.run_thread", run_id=entity.id)


def _page_url(entity_kind: str, entity) -> str:
    if entity_kind == "experiment":
        return url_for("experiments.detail", number=entity.number) + "#discussion"
    if entity_kind == "literature":
        return url_for("library.item", item_id=entity.id) + "#discussion"
    return url_for("runs.detail", run_id=entity.id) + "#discussion"


def _answer(entity_kind: str, entity, *, notice=None, error=None, draft=None, editing=None, edit_error=None):
    """The section for htmx; a redirect (or, on an error, a small page) for plain browsers."""
    context = {"entity_kind": entity_kind, "entity": entity, "notice": notice, "comment_error": error,
               "draft": draft, "editing": editing, "edit_error": edit_error}

    def page():
        if error or edit_error:
            return render_template("discussion/page.html", back=_page_url(entity_kind, entity), **context)
        return redirect(_page_url(entity_kind, entity), code=303)

    return fragment_or_page(lambda: render_template("discussion/_section.html", **context), page)


def _post(entity_kind: str, entity):
    """Post a comment once per form key: an @claude question sent twice asks Claude once."""
    posted = {}

    def post():
        posted["comment"] = discussion.post_comment(entity_kind, entity, request.form.get("body"), access.actor())

    def done():
        if "comment" not in posted:
            return _answer(entity_kind, entity)
        if posted["comment"].run is not None:
            jobs.enqueue_run(posted["comment"].run.id)
        return _answer(entity_kind, entity, notice=posted["comment"].notice)

    return perform(post, done=done, refused=lambda exc: _answer(entity_kind, entity, error=exc.message,
                                                               draft=request.form.get("body")))


@bp.post("/experiments/<int:number>/comments")
@access.owner
def post_experiment(number: int):
    """Post a comment on an experiment; @claude asks Claude."""
    return _post("experiment", experiments.get_experiment(number))


@bp.post("/runs/<run_id>/comments")
@access.owner
def post_run(run_id: str):
    """Post a comment on a run; @claude asks Claude."""
    return _post("run", runs.get_run(run_id))


@bp.post("/library/<item_id>/comments")
@access.owner
def post_literature(item_id: str):
    """Post a comment on a literature item; @claude asks Claude about the item."""
    return _post("literature", literature.get_item(item_id))


@bp.get("/experiments/<int:number>/comments")
@access.owner
def experiment_thread(number: int):
    """The experiment's comments (polled while Claude is answering)."""
    return _thread("experiment", experiments.get_experiment(number))


@bp.get("/runs/<run_id>/comments")
@access.owner
def run_thread(run_id: str):
    """The run's comments (polled while Claude is answering)."""
    return _thread("run", runs.get_run(run_id))


@bp.get("/library/<item_id>/comments")
@access.owner
def literature_thread(item_id: str):
    """The literature item's comments (polled while Claude is answering)."""
    return _thread("literature", literature.get_item(item_id))


def _thread(entity_kind: str, entity):
    """The comments fragment for htmx; a plain visit goes to the page that shows it."""
    return fragment_or_page(
        lambda: render_template("discussion/_comments.html", entity_kind=entity_kind, entity=entity),
        lambda: redirect(_page_url(entity_kind, entity), code=303))


@bp.post("/comments/<comment_id>/edit")
@access.owner
def edit(comment_id: str):
    """Edit one of your own comments."""
    comment = discussion.get_comment(comment_id)
    entity = discussion.entity_for(comment)
    # Only an invalid text is answered beside the editor; a refusal (not yours) answers 403
    # and its toast.
    return perform(lambda: discussion.edit_comment(comment, request.form.get("body"), access.actor()),
                   refused=lambda exc: _answer(comment.entity_kind, entity, editing=comment.id,
                                               edit_error=exc.message),
                   refusals=(ValidationError,), done=lambda: _answer(comment.entity_kind, entity))


@bp.post("/comments/<comment_id>/retry")
@access.owner
def retry(comment_id: str):
    """Ask Claude again when its reply to an @claude question failed (once per form key)."""
    comment = discussion.get_comment(comment_id)
    entity_kind, entity = comment.entity_kind, discussion.entity_for(comment)
    posted = {}

    def ask():
        posted["question"] = discussion.retry_question(comment, access.actor())

    def done():
        question = posted.get("question")
        if question is not None and question.run is not None:
            jobs.enqueue_run(question.run.id)
        return _answer(entity_kind, entity, notice=question.notice if question else None)

    return perform(ask, done=done, refused=lambda exc: _answer(entity_kind, entity, error=exc.message))


@bp.post("/comments/<comment_id>/delete")
@access.owner
def delete(comment_id: str):
    """Delete a comment (the form asks for confirmation first)."""
    comment = discussion.get_comment(comment_id)
    entity_kind, entity = comment.entity_kind, discussion.entity_for(comment)
    return perform(lambda: discussion.delete_comment(comment, access.actor()),
                   done=lambda: _answer(entity_kind, entity))
