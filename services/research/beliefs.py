"""Beliefs and the evidence behind them (SPEC §11.2): create, edit (every change a version),
and the updates an agent proposes, which wait for the owner.

A belief is read as "B<number>" everywhere (pages, API, agents' tools), as an experiment is
read as "#<number>". An agent never changes a belief: it proposes (`propose_update`), and
only the owner's accept makes a version. A proposal remembers the version the agent read
(`based_on_version`); when the belief has moved on since, accepting it needs the owner to
have seen the newer text (`expected_version`), so nothing written against old text lands
blindly.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

import sqlalchemy as sa

from models import AgentRun, Experiment, db
from models.research import Belief, BeliefProposal, BeliefVersion, Project
from services.core import records, registry
from services.core.actors import Actor
from services.core.clock import utcnow
from services.core.errors import Conflict, Forbidden, NotFound, ValidationError
from services.core.sanitize import check_markdown_nesting, render_markdown

NUMBER_COUNTER = "belief_number"
LABEL_PREFIX = "B"
TITLE_MAX = 300
TEXT_MAX = 20_000
NOTE_MAX = 2_000
# The fields a person edits; a version keeps all of them, plus why and on what evidence.
TEXT_FIELDS = ("current_belief", "evidence", "counterevidence", "next_test")
EDITABLE_FIELDS = ("title", *TEXT_FIELDS, "status", "confidence", "project")
_REF = re.compile(r"^\s*[Bb]?\s*(\d{1,9})\s*$")
# A line that starts with an experiment reference ("#12: three seeds"): markdown would read
# it as a heading, so the "#" is escaped and the sanitizer links the reference instead.
_LEADING_REF = re.compile(r"^( {0,3})#(?=\d)", re.MULTILINE)


def label(number: int) -> str:
    """A belief as people and agents cite it: "B12"."""
    return f"{LABEL_PREFIX}{number}"


def render_text(text: str | None) -> str:
    """A belief's markdown field as sanitized HTML, "#12" at the start of a line a link."""
    return render_markdown(_LEADING_REF.sub(r"\1\\#", text or ""))


# --- numbers and lookup ----------------------------------------------------------------

def next_number() -> int:
    """The next belief number, safe under concurrent creators (services.core.records.next_number)."""
    return records.next_number(NUMBER_COUNTER, Belief.number)


def parse_ref(ref) -> int | None:
    """"B12", "b12", "12" → 12; None for anything else."""
    match = _REF.match(str(ref)) if ref is not None else None
    return int(match.group(1)) if match else None


def get_belief(ref) -> Belief:
    """A belief by "B12", 12 or its uuid; NotFound otherwise."""
    number = parse_ref(ref)
    belief = None
    if number is not None:
        belief = db.session.scalar(sa.select(Belief).where(Belief.number == number))
    else:
        try:
            belief = db.session.get(Belief, uuid.UUID(str(ref)))
        except ValueError:
            belief = None
    if belief is None:
        raise NotFound(f"No belief {ref}. Beliefs are named B<number>, e.g. B3.")
    return belief


def find_project(ref) -> Project | None:
    """The project a form or body names (slug or uuid); None for none; a clear error for one
    that does not exist."""
    if ref is None or (isinstance(ref, str) and not ref.strip()):
        return None
    if not isinstance(ref, str):
        raise ValidationError("project must be a project's slug.", field="project")
    text = ref.strip()
    project = db.session.scalar(sa.select(Project).where(Project.slug == text))
    if project is None:
        try:
            project = db.session.get(Project, uuid.UUID(text))
        except ValueError:
            project = None
    if project is None:
        raise ValidationError(f"No project with the slug {text}.", field="project")
    return project


def project_choices(current_id=None) -> list[Project]:
    """Projects a belief may belong to, for the form's select: archived ones left out, except
    the belief's own (`current_id`), which an edit must not drop unasked."""
    keep = sa.or_(Project.status != "archived", Project.id == current_id) if current_id else \
        Project.status != "archived"
    return list(db.session.scalars(sa.select(Project).where(keep).order_by(Project.title)))


# --- input -----------------------------------------------------------------------------

def _text(data: dict, name: str, limit: int = TEXT_MAX) -> str:
    value = data.get(name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise ValidationError(f"{name} must be text.", field=name)
    if len(value) > limit:
        raise ValidationError(f"{name} is too long: {len(value):,} characters; the limit is {limit:,}.", field=name)
    check_markdown_nesting(value)
    return _normalized(value)


def _normalized(value) -> str:
    # Browsers send textareas with CRLF line ends; stored text uses LF, so an unedited
    # field compares equal to what was shown.
    return value.replace("\r\n", "\n").strip() if isinstance(value, str) else value


def _choice(value, name: str, choices) -> str:
    if value not in choices:
        raise ValidationError(f"{name} must be one of: {', '.join(choices)}.", field=name)
    return value


def clean_fields(data: dict, *, partial: bool = False) -> dict:
    """The belief fields of `data`, checked; `partial` for an edit (only what was sent)."""
    unknown = sorted(set(data) - set(EDITABLE_FIELDS) - {"reasoning", "experiment"})
    if unknown:
        raise ValidationError(f"Unknown field(s): {', '.join(unknown)}.", field=unknown[0])
    cleaned: dict = {}
    if not partial or "title" in data:
        title = data.get("title")
        if not isinstance(title, str) or not title.strip():
            raise ValidationError("Give the belief a title (1–300 characters).", field="title")
        if len(title.strip()) > TITLE_MAX:
            raise ValidationError(f"The title is too long: {len(title.strip())} characters; the limit is "
                                  f"{TITLE_MAX}.", field="title")
        cleaned["title"] = title.strip()
    for name in TEXT_FIELDS:
        if not partial or name in data:
            cleaned[name] = _text(data, name)
    if not partial or "status" in data:
        cleaned["status"] = _choice(data.get("status") or ("draft" if not partial else None), "status",
                                    registry.BELIEF_STATUSES)
    if not partial or "confidence" in data:
        cleaned["confidence"] = _choice(data.get("confidence") or ("LOW" if not partial else None), "confidence",
                                        registry.CONFIDENCES)
    if "project" in data:
        project = find_project(data.get("project"))
        cleaned["project_id"] = project.id if project else None
    return cleaned


def _evidence_experiment(ref) -> Experiment | None:
    """The experiment a change cites as its evidence ("#12"), or None."""
    if ref is None or (isinstance(ref, str) and not ref.strip()):
        return None
    text = str(ref).strip().lstrip("#")
    experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == int(text))) \
        if text.isdigit() and int(text) < 2**31 else None
    if experiment is None:
        raise ValidationError(f"No experiment {ref}; name it as #<number>.", field="experiment")
    return experiment


def _refuse_agents(actor: Actor) -> None:
    # Claude never changes a belief without the owner: agents propose (propose_update).
    if actor.kind == "agent":
        raise Forbidden("An agent cannot change a belief; propose an update for the owner instead.")


# --- create and edit -------------------------------------------------------------------

def _version_from(belief: Belief, actor_kind: str, actor_label: str, *, reasoning: str = "",
                  experiment_id=None, proposal_id=None) -> BeliefVersion:
    return BeliefVersion(belief_id=belief.id, version=belief.version, title=belief.title,
                         current_belief=belief.current_belief, evidence=belief.evidence,
                         counterevidence=belief.counterevidence, next_test=belief.next_test,
                         status=belief.status, confidence=belief.confidence, reasoning_md=reasoning,
                         author_kind=actor_kind, author_label=actor_label[:120],
                         experiment_id=experiment_id, proposal_id=proposal_id)


def create_belief(data: dict, actor: Actor) -> Belief:
    """A new belief at version 1 (its first version recorded too); the caller commits."""
    _refuse_agents(actor)
    cleaned = clean_fields(data)
    reasoning = _text(data, "reasoning")
    experiment = _evidence_experiment(data.get("experiment"))
    belief = Belief(id=uuid.uuid4(), number=next_number(), version=1, **cleaned)
    db.session.add(belief)
    db.session.flush()
    db.session.add(_version_from(belief, actor.kind, actor.label, reasoning=reasoning,
                                 experiment_id=experiment.id if experiment else None))
    return belief


def edit_belief(belief: Belief, data: dict, actor: Actor, *, expected_version: int | None = None) -> bool:
    """Apply the owner's edit as a new version; False when nothing changed (no version).
    `expected_version`: the version the editor was read at; a newer one is refused (409)."""
    _refuse_agents(actor)
    cleaned = clean_fields(data, partial=True)
    reasoning = _text(data, "reasoning")
    experiment = _evidence_experiment(data.get("experiment"))
    if expected_version is not None and expected_version != belief.version:
        raise Conflict(f"{label(belief.number)} changed since you opened it (now version {belief.version}); "
                       "review the new text and edit again.", code="belief_changed")
    changed = {name: value for name, value in cleaned.items() if getattr(belief, name) != value}
    if not changed:
        return False
    for name, value in changed.items():
        setattr(belief, name, value)
    belief.version += 1
    db.session.add(_version_from(belief, actor.kind, actor.label, reasoning=reasoning,
                                 experiment_id=experiment.id if experiment else None))
    return True


# --- reading ---------------------------------------------------------------------------

@dataclass(frozen=True)
class BeliefFilters:
    project: str = ""
    status: str = ""

    @classmethod
    def from_args(cls, args) -> "BeliefFilters":
        """Filters from a query string; unknown values are dropped, not errors."""
        status = args.get("status", "")
        return cls(project=(args.get("project") or "").strip()[:80],
                   status=status if status in registry.BELIEF_STATUSES else "")


def belief_list(filters: BeliefFilters = BeliefFilters(), *, text: str = "", limit: int = 500) -> list[Belief]:
    """Beliefs, newest change first, by project (slug) and status, and words in their text."""
    query = sa.select(Belief)
    if filters.project:
        query = query.join(Project, Project.id == Belief.project_id).where(Project.slug == filters.project)
    if filters.status:
        query = query.where(Belief.status == filters.status)
    for word in [w for w in re.split(r"\s+", text.strip()) if w][:10]:
        number = parse_ref(word)
        pattern = "%" + word.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        condition = sa.or_(*(column.ilike(pattern, escape="\\") for column in
                             (Belief.title, Belief.current_belief, Belief.evidence, Belief.counterevidence,
                              Belief.next_test)))
        if number is not None and number < 2**31:
            condition = sa.or_(condition, Belief.number == number)
        query = query.where(condition)
    return list(db.session.scalars(query.order_by(Belief.updated_at.desc(), Belief.number.desc()).limit(limit)))


NEAREST_WORDS = 12
_COMMON_WORDS = frozenset("the and for with from that this what when does into than are was were how why its "
                          "our can not".split())


def nearest(text: str, *, exclude_id=None) -> Belief | None:
    """The live belief (not retracted or archived) sharing the most of `text`'s words, a word in
    its title counting twice; the most recently changed wins a tie; None when no belief shares
    a word. One query."""
    words = [w for w in "".join(c if c.isalnum() else " " for c in (text or "").lower()).split()
             if len(w) > 2 and w not in _COMMON_WORDS][:NEAREST_WORDS]
    if not words:
        return None
    score = sa.literal(0)
    for word in dict.fromkeys(words):
        pattern = f"%{word}%"
        score = score + sa.case((Belief.title.ilike(pattern), 2), else_=0) \
            + sa.case((Belief.current_belief.ilike(pattern), 1), else_=0)
    statement = sa.select(Belief).where(Belief.status.not_in(("retracted", "archived")), score > 0)
    if exclude_id is not None:
        statement = statement.where(Belief.id != exclude_id)
    return db.session.scalars(statement.order_by(score.desc(), Belief.updated_at.desc(), Belief.number.desc())
                              .limit(1)).first()


def projects_by_id(ids) -> dict:
    ids = {i for i in ids if i}
    if not ids:
        return {}
    return {p.id: p for p in db.session.scalars(sa.select(Project).where(Project.id.in_(ids)))}


def versions(belief: Belief) -> list[BeliefVersion]:
    """Every version, newest first."""
    return list(db.session.scalars(sa.select(BeliefVersion).where(BeliefVersion.belief_id == belief.id)
                                   .order_by(BeliefVersion.version.desc())))


_COMPARED = (("title", "title"), ("status", "status"), ("confidence", "confidence"),
             ("current_belief", "the belief's text"), ("evidence", "evidence"),
             ("counterevidence", "counterevidence"), ("next_test", "next test"))


@dataclass(frozen=True)
class TimelineEntry:
    """One version on the belief's timeline of evidence: what changed, why, on which
    experiment, who."""
    version: BeliefVersion
    changes: list[str]
    experiment_number: int | None


def timeline(belief: Belief) -> list[TimelineEntry]:
    """The history, newest first, each version compared with the one before it."""
    rows = versions(belief)
    numbers = dict(db.session.execute(sa.select(Experiment.id, Experiment.number).where(
        Experiment.id.in_({r.experiment_id for r in rows if r.experiment_id}))).all()) if rows else {}
    entries = []
    for index, row in enumerate(rows):
        before = rows[index + 1] if index + 1 < len(rows) else None
        if before is None:
            changes = ["created"]
        else:
            changes = []
            for name, words in _COMPARED:
                old, new = getattr(before, name), getattr(row, name)
                if old == new:
                    continue
                changes.append(f"{words} {old} → {new}" if name in ("status", "confidence") else f"{words} changed")
        entries.append(TimelineEntry(row, changes, numbers.get(row.experiment_id)))
    return entries


# --- proposed updates ------------------------------------------------------------------

def propose_update(belief: Belief, experiment: Experiment | None, run: AgentRun | None, *, status: str,
                   confidence: str, text: str, evidence: str = "", reasoning: str = "",
                   based_on_version: int | None = None) -> BeliefProposal:
    """Record an agent's proposed update for the owner to accept, edit or reject. A pending
    proposal for the same belief is superseded by this newer one. `based_on_version` is the
    version the agent read (the current one when not given)."""
    data = {"current_belief": text, "evidence": evidence, "reasoning": reasoning}
    proposed_text = _text(data, "current_belief")
    if not proposed_text:
        raise ValidationError("Give the proposed text of the belief.", field="text")
    evidence_md, reasoning_md = _text(data, "evidence"), _text(data, "reasoning")
    if not reasoning_md:
        raise ValidationError("Give the reasoning: why the evidence moves the belief this way.", field="reasoning")
    _choice(status, "status", registry.BELIEF_STATUSES)
    _choice(confidence, "confidence", registry.CONFIDENCES)
    based_on = belief.version if based_on_version is None else based_on_version
    if not isinstance(based_on, int) or isinstance(based_on, bool) or not 1 <= based_on <= belief.version:
        raise ValidationError(f"based_on_version must be a version of {label(belief.number)} "
                              f"(1 to {belief.version}).", field="based_on_version")
    now = utcnow()
    db.session.execute(sa.update(BeliefProposal).where(BeliefProposal.belief_id == belief.id,
                                                       BeliefProposal.status == "pending")
                       .values(status="superseded", resolved_at=now, updated_at=now,
                               resolution_note="A newer proposal for this belief replaced it."))
    proposal = BeliefProposal(belief_id=belief.id, experiment_id=experiment.id if experiment else None,
                              agent_run_id=run.id if run else None, based_on_version=based_on,
                              proposed_status=status, proposed_confidence=confidence, proposed_text=proposed_text,
                              evidence_md=evidence_md, reasoning_md=reasoning_md)
    db.session.add(proposal)
    db.session.flush()
    return proposal


def get_proposal(belief: Belief, proposal_id) -> BeliefProposal:
    try:
        key = uuid.UUID(str(proposal_id))
    except ValueError:
        key = None
    proposal = db.session.get(BeliefProposal, key) if key else None
    if proposal is None or proposal.belief_id != belief.id:
        raise NotFound(f"No such proposal on {label(belief.number)}.")
    return proposal


def proposals(belief: Belief, *, pending_only: bool = False) -> list[BeliefProposal]:
    query = sa.select(BeliefProposal).where(BeliefProposal.belief_id == belief.id)
    if pending_only:
        query = query.where(BeliefProposal.status == "pending")
    return list(db.session.scalars(query.order_by(BeliefProposal.created_at.desc())))


def _refuse_unless_pending(proposal: BeliefProposal) -> None:
    if proposal.status != "pending":
        raise Conflict(f"This proposal is already {proposal.status}; only a pending one can be accepted or "
                       "rejected.", code="proposal_resolved")


def is_stale(belief: Belief, proposal: BeliefProposal) -> bool:
    """Made against a version older than the belief's current one."""
    return proposal.based_on_version != belief.version


def accepted_fields(belief: Belief, proposal: BeliefProposal) -> dict:
    """What accepting `proposal` as proposed sets: its text, status and confidence, and its
    evidence added to the belief's (what the edit-then-accept form opens with)."""
    evidence = "\n\n".join(part for part in (belief.evidence, proposal.evidence_md) if part)
    return {"current_belief": proposal.proposed_text, "status": proposal.proposed_status,
            "confidence": proposal.proposed_confidence, "evidence": evidence,
            "reasoning": proposal.reasoning_md}


def _agent_label(proposal: BeliefProposal) -> str:
    run = db.session.get(AgentRun, proposal.agent_run_id) if proposal.agent_run_id else None
    return f"Claude ({run.agent})" if run else "Claude"


def accept_proposal(belief: Belief, proposal: BeliefProposal, actor: Actor, *, edits: dict | None = None,
                    expected_version: int | None = None) -> BeliefVersion:
    """The owner accepts a proposal, as proposed or with `edits`: a new version whose author
    names both (the owner, accepting Claude's proposal). Refused (409) when the belief has
    changed since the proposal was made or since the owner's form was read, unless the
    owner's `expected_version` shows they reviewed the current text."""
    if actor.kind != "owner":
        raise Forbidden("Only the owner accepts an update to a belief.")
    _refuse_unless_pending(proposal)
    if (expected_version is not None and expected_version != belief.version) or \
            (expected_version is None and is_stale(belief, proposal)):
        raise Conflict(f"The belief changed since (now version {belief.version}; the proposal was made against "
                       f"version {proposal.based_on_version}); review the new text.", code="belief_changed",
                       version=belief.version)
    as_proposed = accepted_fields(belief, proposal)
    edited = any(_normalized(as_proposed.get(name)) != _normalized(value) for name, value in (edits or {}).items())
    fields = as_proposed | (edits or {})
    cleaned = clean_fields({k: v for k, v in fields.items() if k != "reasoning"}, partial=True)
    reasoning = _text(fields, "reasoning")
    for name, value in cleaned.items():
        setattr(belief, name, value)
    belief.version += 1
    verb = "editing and accepting" if edited else "accepting"
    version = _version_from(belief, "owner", f"{actor.label or 'owner'}, {verb} {_agent_label(proposal)}'s proposal",
                            reasoning=reasoning, experiment_id=proposal.experiment_id, proposal_id=proposal.id)
    db.session.add(version)
    now = utcnow()
    proposal.status, proposal.resolved_at = "accepted", now
    proposal.resolution_note = "Accepted with edits." if edited else "Accepted as proposed."
    return version


def reject_proposal(belief: Belief, proposal: BeliefProposal, actor: Actor, note: str = "") -> None:
    """The owner rejects a proposal, with an optional note saying why; the belief is unchanged."""
    if actor.kind != "owner":
        raise Forbidden("Only the owner rejects an update to a belief.")
    _refuse_unless_pending(proposal)
    if not isinstance(note, str):
        raise ValidationError("note must be text.", field="note")
    if len(note) > NOTE_MAX:
        raise ValidationError(f"The note is too long (at most {NOTE_MAX:,} characters).", field="note")
    proposal.status, proposal.resolved_at = "rejected", utcnow()
    proposal.resolution_note = note.strip()


@dataclass(frozen=True)
class PendingProposal:
    """A proposal waiting for the owner, with what it is about, for owner-turn lists."""
    proposal: BeliefProposal
    belief: Belief
    experiment_number: int | None
    stale: bool


def pending_proposals(experiment: Experiment | None = None, belief: Belief | None = None) -> list[PendingProposal]:
    """Proposals waiting for the owner, oldest first (all, one experiment's or one belief's)."""
    query = sa.select(BeliefProposal, Belief, Experiment.number) \
        .join(Belief, Belief.id == BeliefProposal.belief_id) \
        .outerjoin(Experiment, Experiment.id == BeliefProposal.experiment_id) \
        .where(BeliefProposal.status == "pending")
    if experiment is not None:
        query = query.where(BeliefProposal.experiment_id == experiment.id)
    if belief is not None:
        query = query.where(BeliefProposal.belief_id == belief.id)
    rows = db.session.execute(query.order_by(BeliefProposal.created_at)).all()
    return [PendingProposal(p, b, n, is_stale(b, p)) for p, b, n in rows]


def owner_turn_total() -> int:
    """Experiments waiting for the owner plus proposed belief updates waiting, in one round
    trip: the header shows it on every page, so it must not cost the board a second query."""
    experiments_waiting = sa.select(sa.func.count()).select_from(Experiment) \
        .where(Experiment.status.in_(registry.OWNER_TURN_STATUSES)).scalar_subquery()
    proposals_waiting = sa.select(sa.func.count()).select_from(BeliefProposal) \
        .where(BeliefProposal.status == "pending").scalar_subquery()
    return db.session.scalar(sa.select(experiments_waiting + proposals_waiting)) or 0
