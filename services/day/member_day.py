"""A member's first page (SPEC §13): what waits on them, what changed in their projects and what
became of what they proposed — in a constant number of queries, whatever the projects hold.

Only what the member could open anyway: the discussion of their projects' experiments (for
roles that read experiments), and their own proposals with where each stands now.
"""
from __future__ import annotations

from dataclasses import dataclass

import sqlalchemy as sa

from models import Comment, Experiment, Project, Todo, db
from services.core import permissions, registry
from services.core.records import among
from services.day import todos, weekly_review

RECENT_COMMENTS = 10
OWN_PROPOSALS = 20
WAITING_SHOWN = 50


@dataclass
class MemberDay:
    recent_comments: list  # rows: author_name, author_kind, created_at, body_md, number, project_slug
    proposed_experiments: list  # rows: number, title, status, project_slug
    proposed_todos: list  # rows: number, title, status
    waiting: list  # todos assigned to them, open: number, title, priority, status, project_slug, project_title
    reviews: list  # weekly reviews shown to mentor accounts: week_end, version, published_at


_PRIORITY_FIRST = sa.case({p: rank for rank, p in enumerate(reversed(registry.PRIORITIES))}, value=Todo.priority)


def waiting_on(account, project_ids) -> list:
    """The open todos the owner assigned to this member in projects they still work on, most
    urgent first (one query; none for a role that works on no todo)."""
    if not project_ids or not permissions.role_may(account.role, todos.WORK_ON_ASSIGNED):
        return []
    return db.session.execute(
        sa.select(Todo.number, Todo.title, Todo.priority, Todo.status, Project.slug.label("project_slug"),
                  Project.title.label("project_title"))
        .join(Project, Project.id == Todo.project_id)
        .where(Todo.assigned_member_id == account.id, among(Todo.project_id, project_ids),
               Todo.status.not_in(sorted(registry.TODO_CLOSED_STATUSES)))
        .order_by(_PRIORITY_FIRST, Todo.number.desc()).limit(WAITING_SHOWN)).all()


def for_member(account) -> MemberDay:
    """The member's Today: the newest comments in their projects and their own proposals."""
    project_ids = sorted(permissions.project_ids(account))
    comments = []
    if project_ids and permissions.role_may(account.role, "read_experiment"):
        comments = db.session.execute(
            sa.select(Comment.author_name, Comment.author_kind, Comment.created_at, Comment.body_md,
                      Experiment.number, Project.slug.label("project_slug"))
            .join(Experiment, sa.and_(Comment.entity_kind == "experiment", Comment.entity_id == Experiment.id))
            .join(Project, Project.id == Experiment.project_id)
            .where(among(Experiment.project_id, project_ids))
            .order_by(Comment.created_at.desc()).limit(RECENT_COMMENTS)).all()
    # Their own proposals, in projects they still cover (a proposal outside them is out of reach now).
    experiments = db.session.execute(
        sa.select(Experiment.number, Experiment.title, Experiment.status, Project.slug.label("project_slug"))
        .join(Project, Project.id == Experiment.project_id)
        .where(Experiment.proposed_by_member_id == account.id, among(Experiment.project_id, project_ids))
        .order_by(Experiment.number.desc()).limit(OWN_PROPOSALS)).all() if project_ids else []
    proposed = db.session.execute(
        sa.select(Todo.number, Todo.title, Todo.status)
        .where(Todo.proposed_by_member_id == account.id, among(Todo.project_id, project_ids))
        .order_by(Todo.number.desc()).limit(OWN_PROPOSALS)).all() if project_ids else []
    reviews = weekly_review.shown_to_mentors() \
        if permissions.role_may(account.role, "read_shown_review") else []
    return MemberDay(comments, experiments, proposed, waiting_on(account, project_ids), reviews)
