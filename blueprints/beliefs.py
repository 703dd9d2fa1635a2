"""Beliefs (SPEC §11.2): the list, the new-belief form, a belief's page with its timeline of
evidence, the owner's edit (a new version) and the owner's answer to a proposed update.
Views are thin; services.research.beliefs does the work.

A refused form is shown again on its page with the sentence and what the owner typed, at
the refusal's status (422 for bad input, 409 when the belief changed since it was read)."""
from __future__ import annotations

from flask import Blueprint, redirect, render_template, request, url_for
from markupsafe import Markup

from blueprints import access, filters
from blueprints._actions import perform
from blueprints._htmx import render
from models.research import Belief
from services.core import registry
from services.core.errors import SaganError, ValidationError
from services.research import beliefs, links

bp = Blueprint("beliefs", __name__)

FORM_FIELDS = ("title", "current_belief", "evidence", "counterevidence", "next_test", "status", "confidence",
               "project", "reasoning", "experiment")
PROPOSAL_FIELDS = ("current_belief", "status", "confidence", "evidence", "reasoning")


def markdown(text: str | None) -> Markup:
    """A belief's markdown field as sanitized HTML (services.core.sanitize is the only maker)."""
    return filters.sanitized(beliefs.render_text(text))


def init_app(app) -> None:
    app.add_template_filter(markdown, "belief_markdown")
    app.add_template_global(beliefs.label, "belief_label")


def _form_of(belief: Belief | None) -> dict:
    if belief is None:
        return {name: "" for name in FORM_FIELDS} | {"status": "draft", "confidence": "LOW"}
    project = beliefs.projects_by_id([belief.project_id]).get(belief.project_id)
    return {"title": belief.title, "current_belief": belief.current_belief, "evidence": belief.evidence,
            "counterevidence": belief.counterevidence, "next_test": belief.next_test, "status": belief.status,
            "confidence": belief.confidence, "project": project.slug if project else "", "reasoning": "",
            "experiment": ""}


def _choices(belief: Belief | None = None) -> dict:
    return {"statuses": registry.BELIEF_STATUSES, "confidences": registry.CONFIDENCES,
            "projects": beliefs.project_choices(belief.project_id if belief else None)}


@bp.get("/beliefs")
@access.owner
def index():
    """Beliefs, newest change first, filtered by project and status."""
    filters = beliefs.BeliefFilters.from_args(request.args)
    found = beliefs.belief_list(filters)
    return render("beliefs/index.html", "beliefs/_list.html", beliefs=found, filters=filters,
                  project_of=beliefs.projects_by_id(b.project_id for b in found),
                  waiting_ids={item.belief.id for item in beliefs.pending_proposals()}, **_choices())


@bp.route("/beliefs/new", methods=["GET", "POST"])
@access.owner
def new():
    """The new-belief form; a refusal shows it again with the sentence and what was typed."""
    if request.method == "GET":
        return render_template("beliefs/new.html", form=_form_of(None), error=None, **_choices())
    form = {name: request.form.get(name, "") for name in FORM_FIELDS}
    created = {}

    def create():
        created["belief"] = beliefs.create_belief(form, access.actor())

    def done():
        if "belief" in created:
            return redirect(url_for("beliefs.detail", number=created["belief"].number), code=303)
        return redirect(url_for("beliefs.index"), code=303)  # a repeated post that already created it

    def refused(exc: SaganError):
        return render_template("beliefs/new.html", form=form, error=exc, **_choices()), _status(exc)

    return perform(create, done=done, refused=refused)


def _status(exc: SaganError) -> int:
    return 422 if isinstance(exc, ValidationError) else exc.status_code


def _page(belief: Belief, *, errors: dict | None = None, form: dict | None = None,
          proposal_forms: dict | None = None, status: int = 200):
    project = beliefs.projects_by_id([belief.project_id]).get(belief.project_id)
    pending = beliefs.pending_proposals(belief=belief)
    errors = dict(errors or {})
    shown_beside = {"edit"} | {str(item.proposal.id) for item in pending}
    # A refusal about a proposal no longer pending has no form to sit beside: it heads the page.
    page_errors = [errors.pop(key) for key in list(errors) if key not in shown_beside]
    body = render_template(
        "beliefs/detail.html", belief=belief, project=project, timeline=beliefs.timeline(belief),
        pending=pending, as_proposed={item.proposal.id: beliefs.accepted_fields(belief, item.proposal)
                                      for item in pending},
        proposal_forms=proposal_forms or {}, resolved=[p for p in beliefs.proposals(belief) if p.status != "pending"],
        link_panel=links.panel("belief", belief.id), errors=errors, page_errors=page_errors,
        form=form or _form_of(belief),
        **_choices(belief))
    return body, status, {"Cache-Control": "no-store"}


@bp.get("/beliefs/<int:number>")
@access.owner
def detail(number: int):
    """One belief: its text, status and confidence, evidence, the timeline of its versions,
    proposed updates waiting for the owner, and its links both ways."""
    return _page(beliefs.get_belief(number))


def _back(number: int, anchor: str = ""):
    return redirect(url_for("beliefs.detail", number=number) + (f"#{anchor}" if anchor else ""), code=303)


def _expected_version() -> int | None:
    raw = request.form.get("expected_version", "")
    if not raw:
        return None
    if not raw.isdigit():
        raise ValidationError("This form carries a malformed version; reload the page.", field="expected_version")
    return int(raw)


@bp.post("/beliefs/<int:number>/edit")
@access.owner
def edit(number: int):
    """The owner's edit: a new version with the reasoning and the experiment it rests on."""
    belief = beliefs.get_belief(number)
    form = {name: request.form.get(name, "") for name in FORM_FIELDS}
    return perform(lambda: beliefs.edit_belief(belief, form, access.actor(), expected_version=_expected_version()),
                   done=lambda: _back(number, "history"),
                   refused=lambda exc: _page(beliefs.get_belief(number), errors={"edit": exc}, form=form,
                                             status=_status(exc)))


@bp.post("/beliefs/<int:number>/proposals/<proposal_id>/accept")
@access.owner
def accept(number: int, proposal_id: str):
    """Accept a proposed update as proposed, or with the owner's edits (`edited=1`)."""
    belief = beliefs.get_belief(number)
    proposal = beliefs.get_proposal(belief, proposal_id)
    edits = {name: request.form.get(name, "") for name in PROPOSAL_FIELDS} \
        if request.form.get("edited") == "1" else None
    return perform(lambda: beliefs.accept_proposal(belief, proposal, access.actor(), edits=edits,
                                                   expected_version=_expected_version()),
                   done=lambda: _back(number, "history"),
                   refused=lambda exc: _page(beliefs.get_belief(number), errors={str(proposal.id): exc},
                                             proposal_forms={proposal.id: edits} if edits else None,
                                             status=_status(exc)))


@bp.post("/beliefs/<int:number>/proposals/<proposal_id>/reject")
@access.owner
def reject(number: int, proposal_id: str):
    """Reject a proposed update, with a note saying why; the belief stays as it is."""
    belief = beliefs.get_belief(number)
    proposal = beliefs.get_proposal(belief, proposal_id)
    return perform(lambda: beliefs.reject_proposal(belief, proposal, access.actor(), request.form.get("note", "")),
                   done=lambda: _back(number, "proposals"),
                   refused=lambda exc: _page(beliefs.get_belief(number), errors={str(proposal.id): exc},
                                             status=_status(exc)))
