"""What each role may do, on which record: the one place that decides (SPEC §13).

The access rules (blueprints/access.py) ask `can(account, action)` before a view runs; a view
that shows or changes one record asks `can(account, action, record)` and answers 404 when
the record lies outside the account's projects, as if it did not exist.

Deny by default: an action no role lists is the owner's alone, and every route that does not
name a member action (`access.allow(...)`) is `OWNER_ONLY`. A half-built member feature
therefore shows members less, never more. docs/security.md carries this table in prose.
"""
from __future__ import annotations

import uuid

import sqlalchemy as sa

from models import MemberProject, Project, db
from services.core import registry

# Every route not deliberately opened to members.
OWNER_ONLY = "owner_only"
# Any active account: the member's own home page, signing out.
SIGNED_IN = "signed_in"

COLLABORATOR_ACTIONS = frozenset({
    SIGNED_IN,
    "read_project", "read_experiment", "read_result", "read_belief", "read_literature", "read_narrative",
    "comment",
    "propose_experiment", "propose_todo", "propose_literature", "propose_link",
    # A todo the owner assigned to them (services/day/todos.py): see it and mark it done.
    "work_on_assigned_todo",
    # Only an experiment whose logs the owner shared (Experiment.agent_logs_shared; the view checks).
    "read_shared_agent_logs",
})
MENTOR_ACTIONS = frozenset({SIGNED_IN, "read_project", "read_result", "read_narrative", "comment",
                            # A weekly review the owner showed to mentor accounts (it spans every project).
                            "read_shown_review"})

# What no member may do, whatever their projects; listed so the table is explicit (and tested)
# rather than implied by absence. Agent logs and private notes wait for a per-experiment share.
NEVER_FOR_MEMBERS = frozenset({
    OWNER_ONLY, "approve", "dispatch", "spend", "promote", "change_settings", "read_costs_settings",
    "read_secrets", "read_agent_logs", "read_private_notes", "manage_members",
})

_ROLE_ACTIONS: dict[str, frozenset[str]] = {"collaborator": COLLABORATOR_ACTIONS, "mentor": MENTOR_ACTIONS}

# The most an API token of each role may hold (a token never exceeds its holder's role).
TOKEN_SCOPES_BY_ROLE = {
    "owner": tuple(registry.API_TOKEN_SCOPES),
    "collaborator": ("read", "write"),  # write: proposals and comments, never dispatch or promote
    "mentor": ("read",),
}

assert not (COLLABORATOR_ACTIONS | MENTOR_ACTIONS) & NEVER_FOR_MEMBERS
assert set(_ROLE_ACTIONS) | {"owner"} == set(registry.ACCOUNT_ROLES)


def role_may(role: str | None, action: str) -> bool:
    """May an account of `role` do `action` at all (on some record of its scope)?"""
    if role == "owner":
        return True
    return action in _ROLE_ACTIONS.get(role or "", frozenset())


def project_ids(account) -> frozenset[uuid.UUID]:
    """The projects a member covers (read once per request and kept on the account object)."""
    cached = getattr(account, "_member_project_ids", None)
    if cached is None:
        cached = frozenset(db.session.scalars(
            sa.select(MemberProject.project_id).where(MemberProject.user_id == account.id)))
        account._member_project_ids = cached
    return cached


def _project_of(record) -> uuid.UUID | None:
    if isinstance(record, Project):
        return record.id
    return getattr(record, "project_id", None)


def can(account, action: str, record=None) -> bool:
    """May `account` (a User; None for nobody) do `action`, on `record` if one is given?

    Members act only within their projects: a record without a project, or of another
    project, is out of reach. A removed account may do nothing."""
    if account is None or getattr(account, "removed_at", None) is not None:
        return False
    role = getattr(account, "role", None)
    if not role_may(role, action):
        return False
    if role == "owner" or record is None:
        return True
    project_id = _project_of(record)
    return project_id is not None and project_id in project_ids(account)


def token_scopes_allowed(role: str | None) -> tuple[str, ...]:
    return TOKEN_SCOPES_BY_ROLE.get(role or "", ())
