"""The API routes open to members (SPEC §13), under /api/m/: their projects'
experiments, shared results, beliefs and papers; comments; proposed experiments, todos,
papers and typed links. A member reaches them with their session or a token of their own
(`access.member_api`: `read` to read, `write` to write); the owner reaches them too.

Every record is read through services/research/member_records.py, which confines it to the
account's projects, and answered by the serializers here, which carry what a member may read
and nothing else: an experiment's question, status, hypothesis, promoted result and
discussion — never its runs, costs, plans, pods or agent logs. Every other API route stays
the owner's (`api`, `owner_api`).
"""
from __future__ import annotations

from flask import request

from blueprints import access
from blueprints._actions import commit_then_run
from blueprints.api._common import Routes, api_name, body_fields, int_arg, iso
from models import db
from services.core import permissions
from services.core.errors import ValidationError
from services.day import todos
from services.planning import discussion
from services.research import literature as literature_service
from services.research import links, member_records
from services.results import results
from services.workflow import experiments as experiment_service
from services.workflow import jobs

routes = Routes()


def project_json(project) -> dict:
    return {"slug": project.slug, "title": project.title, "question": project.question or "",
            "status": project.status}


def experiment_json(experiment, project_slug: str | None) -> dict:
    """What a member reads of an experiment in a list: no runs, costs, plans or pods."""
    return {"id": str(experiment.id), "number": experiment.number, "title": experiment.title,
            "status": experiment.status, "hypothesis": experiment.hypothesis or "", "project": project_slug,
            "proposedByMember": experiment.proposed_by_member_id is not None,
            "createdAt": iso(experiment.created_at), "updatedAt": iso(experiment.updated_at)}


def promotion_json(promotion) -> dict | None:
    if promotion is None:
        return None
    return {"title": promotion.title, "bodyHtml": promotion.body, "promotedTo": promotion.promoted_to,
            "promotedAt": iso(promotion.promoted_at)}


def comment_json(comment) -> dict:
    return {"id": str(comment.id), "authorKind": comment.author_kind, "authorName": comment.author_name,
            "bodyHtml": comment.body_html, "createdAt": iso(comment.created_at)}


def belief_json(belief, project_slug: str | None) -> dict:
    return {"id": str(belief.id), "number": belief.number, "title": belief.title, "project": project_slug,
            "status": belief.status, "confidence": belief.confidence, "currentBelief": belief.current_belief,
            "nextTest": belief.next_test}


def paper_json(item, project_slug: str | None) -> dict:
    return {"id": str(item.id), "title": item.title, "authors": list(item.authors or []), "year": item.year,
            "url": item.url or "", "doi": item.doi, "arxivId": item.arxiv_id, "project": project_slug,
            "suggestedByMember": item.proposed_by_member_id is not None}


def link_json(link) -> dict:
    return {"id": str(link.id), "kind": link.kind, "source": {"kind": link.source_kind, "id": str(link.source_id)},
            "target": {"kind": link.target_kind, "id": str(link.target_id)}, "note": link.note,
            "actorKind": link.actor_kind, "actorLabel": link.actor_label, "createdAt": iso(link.created_at)}


def member_body(accepted: tuple[str, ...]) -> dict:
    """The JSON body's `accepted` fields; any other field is refused by name, so a member
    learns at once that an owner's field (a cost cap, an author) is not theirs to set."""
    data = body_fields(accepted)
    unknown = sorted(str(key) for key in data if key not in accepted)
    if unknown:
        raise ValidationError(f"Unknown field(s): {', '.join(unknown)}; a member sends "
                              f"{', '.join(api_name(a) for a in accepted)}.", field=unknown[0])
    return data


def proposer_id(account):
    """Whose proposal a write marks: the member's id; none for the owner, whose proposals are
    simply theirs (the owner is nobody's member)."""
    return None if account.is_owner else account.id


# --- reading ------------------------------------------------------------------------------------

@routes.get("/m/projects")
@access.member_api("read_project")
def member_projects():
    """The account's projects."""
    return {"projects": [project_json(p) for p in member_records.projects_of(access.account())]}


@routes.get("/m/experiments")
@access.member_api("read_experiment")
def member_experiments():
    """Experiments of the account's projects, newest first; `project` (slug), `status`, `limit` 1–500."""
    found = member_records.experiments(access.account(), project_slug=request.args.get("project") or None,
                                       status=request.args.get("status") or None,
                                       limit=int_arg("limit", 100, 1, member_records.LIST_MAX))
    slugs = member_records.project_slugs(e.project_id for e in found)
    return {"experiments": [experiment_json(e, slugs.get(e.project_id)) for e in found]}


@routes.get("/m/experiments/<ref>")
@access.member_api("read_experiment")
def member_experiment(ref: str):
    """One experiment by number or uuid: the list's fields, the question first asked, the
    promoted result and the discussion."""
    account = access.account()
    experiment = member_records.experiment(account, ref)
    slug = member_records.project_slugs([experiment.project_id]).get(experiment.project_id)
    promotion = results.promotion_of(experiment) if permissions.can(account, "read_result", experiment) else None
    return {"experiment": {**experiment_json(experiment, slug), "question": results.original_question(experiment),
                           "promotedResult": promotion_json(promotion)},
            "comments": [comment_json(c) for c in discussion.thread("experiment", experiment.id).comments]}


@routes.get("/m/results")
@access.member_api("read_result")
def member_results():
    """Results promoted to `shared` in the account's projects; `project` (slug)."""
    found = member_records.shared_results(access.account(), request.args.get("project") or None)
    return {"results": [{"number": shared.experiment.number, "experimentId": str(shared.experiment.id),
                         "project": project.slug, **promotion_json(shared.promotion)}
                        for project, shared in found]}


@routes.get("/m/beliefs")
@access.member_api("read_belief")
def member_beliefs():
    """Beliefs of the account's projects; `project` (slug)."""
    found = member_records.beliefs(access.account(), request.args.get("project") or None)
    slugs = member_records.project_slugs(b.project_id for b in found)
    return {"beliefs": [belief_json(b, slugs.get(b.project_id)) for b in found]}


@routes.get("/m/literature")
@access.member_api("read_literature")
def member_literature():
    """Papers in the account's projects' libraries; `project` (slug)."""
    found = member_records.literature(access.account(), request.args.get("project") or None)
    slugs = member_records.project_slugs(i.project_id for i in found)
    return {"literature": [paper_json(i, slugs.get(i.project_id)) for i in found]}


# --- writing: comments and proposals, as the member ----------------------------------------------

@routes.post("/m/experiments/<ref>/comments")
@access.member_api("comment")
def member_comment(ref: str):
    """Comment on an experiment of the account's projects (`body`); answers 201 with it. A
    mentor comments on shared results only (as on their pages)."""
    experiment = member_records.commentable_experiment(access.account(), ref)
    data = member_body(("body",))
    posted = discussion.post_comment("experiment", experiment, data.get("body", ""), access.actor())
    db.session.commit()
    if posted.run is not None:  # the owner's @claude (a member's asks no one: members never spend)
        jobs.enqueue_run(posted.run.id)
    return {"comment": comment_json(posted.comment)}, 201


@routes.post("/m/projects/<slug>/experiments")
@access.member_api("propose_experiment")
def member_propose_experiment(slug: str):
    """Propose an experiment in one of the account's projects (`title`, `hypothesis`): it enters
    the owner's queue in `proposed`, as the member's. Answers 201 with it."""
    account = access.account()
    project = member_records.project(account, slug, "propose_experiment")
    data = member_body(("title", "hypothesis"))
    experiment = experiment_service.propose_for_member(data, project.id, proposer_id(account), access.actor())
    db.session.commit()
    return {"experiment": experiment_json(experiment, project.slug)}, 201


@routes.post("/m/projects/<slug>/todos")
@access.member_api("propose_todo")
def member_propose_todo(slug: str):
    """Suggest a todo for one of the account's projects (`title`, `bodyMd`): it lands in the
    owner's inbox as the member's. Answers 201."""
    account = access.account()
    project = member_records.project(account, slug, "propose_todo")
    data = member_body(("title", "body_md"))
    todo = todos.propose_for_member(data, project.slug, proposer_id(account), access.actor())
    db.session.commit()
    return {"todo": {"id": str(todo.id), "number": todo.number, "title": todo.title, "status": todo.status,
                     "project": project.slug}}, 201


@routes.post("/m/projects/<slug>/literature")
@access.member_api("propose_literature")
def member_propose_literature(slug: str):
    """Add a paper to one of the account's projects' library (`title`, `authors`, `year`, `url`),
    as the member's. 201 when added; 200 when the paper is already in this project's library."""
    account = access.account()
    project = member_records.project(account, slug, "propose_literature")
    data = member_body(("title", "authors", "year", "url"))
    added = literature_service.suggest_for_member(data, project.id, proposer_id(account))
    db.session.commit()
    return {"paper": paper_json(added.item, project.slug), "added": added.created}, 201 if added.created else 200


@routes.post("/m/links")
@access.member_api("propose_link")
def member_link():
    """Link two records of one of the account's projects (`source`, `kind`, `target`, `note`),
    each named as typed ("#12", "B3", "arXiv:…", a project's slug); marked as the member's."""
    data = member_body(("source", "kind", "target", "note"))
    link = links.create_member_link(access.account(), data.get("source"), data.get("kind"), data.get("target"),
                                    data.get("note") or "")
    commit_then_run()
    return {"link": link_json(link)}, 201
