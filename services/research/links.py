"""Typed links between any two records (SPEC §11.2), read both ways.

A link names its ends by kind and id, so the database cannot check that they exist; this
module does, through one resolver per record kind (`RESOLVERS`): how to load a record, how
people and agents name one when they type it ("#12", "B3", "T4", a project's slug), its label
("#12 Title", "B3 …") and its page. A kind whose package sits above this one (todos and the
daily log and weekly reviews, in services/day) calls `register` with its resolver and
`register_shorthand` with its typed form ("T4", "log:2026-12-01", "review:2026-12-06"); a kind
whose table arrives with later work (ARRIVING, none now) is a clear error until it does.
"""
from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Callable

import sqlalchemy as sa

from models import AgentRun, CleanResultVersion, Experiment, db
from models.literature import LiteratureItem
from models.research import Belief, Project, ProjectNarrative, RecordLink
from services.core import permissions, registry
from services.core.actors import Actor
from services.core.errors import Conflict, NotFound, ValidationError
from services.research import beliefs
from services.research.literature_sources import normalize_arxiv_id, normalize_doi

NOTE_MAX = 2000


@dataclass(frozen=True)
class Resolver:
    """How one kind of record is found, named and reached. `load(id)` answers the record or
    None; `key(record)` the id a link stores; `find(text)` the record a typed reference
    names, or None. URLs are paths built here (not url_for) so a kind whose pages arrive in
    another blueprint (projects) still links to them."""
    noun: str
    load: Callable[[uuid.UUID], object | None]
    label: Callable[[object], str]
    url: Callable[[object], str]
    find: Callable[[str], object | None]
    key: Callable[[object], uuid.UUID] = lambda record: record.id
    # The table `load` reads by primary key, so a list of links can load each kind's other
    # ends in one query (links_of) rather than one per link.
    model: type | None = None


def _uuid(text) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(text).strip())
    except ValueError:
        return None


def _by_number(model, text: str, prefix: str):
    match = re.fullmatch(rf"\s*{prefix}(\d{{1,9}})\s*", text, flags=re.IGNORECASE)
    if not match:
        return None
    return db.session.scalar(sa.select(model).where(model.number == int(match.group(1))))


# --- the kinds that exist now --------------------------------------------------------------

def _experiment_with_result(experiment_id) -> Experiment | None:
    experiment = db.session.get(Experiment, experiment_id)
    return experiment if experiment is not None and experiment.has_clean_result else None


def _result_title(experiment: Experiment) -> str:
    title = db.session.scalar(sa.select(CleanResultVersion.title)
                              .where(CleanResultVersion.experiment_id == experiment.id)
                              .order_by(CleanResultVersion.created_at.desc()).limit(1))
    return title or experiment.title


def _find_result(text: str) -> Experiment | None:
    # "R12" or "#12 result": the clean result of experiment 12 (a result is kept on its experiment).
    match = re.fullmatch(r"\s*(?:R|#)(\d{1,9})(?:\s+result)?\s*", text, flags=re.IGNORECASE)
    if not match or (text.strip().startswith("#") and "result" not in text.lower()):
        return None
    experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == int(match.group(1))))
    if experiment is not None and not experiment.has_clean_result:
        raise ValidationError(f"#{experiment.number} has no clean result yet.", field="target")
    return experiment


def _run_label(run: AgentRun) -> str:
    number = db.session.scalar(sa.select(Experiment.number).where(Experiment.id == run.scope_id)) \
        if run.scope_kind == "experiment" else None
    return f"{run.agent} run" + (f" on #{number}" if number else "") + f" ({str(run.id)[:8]})"


def _literature_label(item: LiteratureItem) -> str:
    first = (item.authors or ["?"])[0]
    surname = first.split(",")[0].split()[-1] if first.strip() else "?"
    return f"{surname} {item.year or 'n.d.'}: {item.title}"


def _find_literature(text: str) -> LiteratureItem | None:
    """A library item named by its arXiv id ("arXiv:2401.01234") or DOI ("doi:10.1000/x")."""
    lowered = text.strip().lower()
    if lowered.startswith("arxiv:"):
        arxiv_id = normalize_arxiv_id(text.strip()[6:])
        return db.session.scalar(sa.select(LiteratureItem).where(LiteratureItem.arxiv_id == arxiv_id)) \
            if arxiv_id else None
    if lowered.startswith("doi:") or lowered.startswith("10."):
        doi = normalize_doi(text.strip()[4:] if lowered.startswith("doi:") else text.strip())
        return db.session.scalar(sa.select(LiteratureItem).where(LiteratureItem.doi == doi)) if doi else None
    return None


def _narrative_project(narrative: ProjectNarrative) -> Project | None:
    return db.session.get(Project, narrative.project_id)


def _narrative_label(narrative: ProjectNarrative) -> str:
    project = _narrative_project(narrative)
    return f"Narrative v{narrative.version} of {project.title if project else 'a project'}"


def _narrative_url(narrative: ProjectNarrative) -> str:
    project = _narrative_project(narrative)
    return f"/p/{project.slug}#narrative" if project else "/"


RESOLVERS: dict[str, Resolver] = {
    "experiment": Resolver(
        "experiment", lambda i: db.session.get(Experiment, i), lambda e: f"#{e.number} {e.title}",
        lambda e: f"/experiments/{e.number}", lambda text: _by_number(Experiment, text, "#?"), model=Experiment),
    "belief": Resolver(
        "belief", lambda i: db.session.get(Belief, i), lambda b: f"{beliefs.label(b.number)} {b.title}",
        lambda b: f"/beliefs/{b.number}", lambda text: _by_number(Belief, text, "B"), model=Belief),
    "project": Resolver(
        "project", lambda i: db.session.get(Project, i), lambda p: p.title, lambda p: f"/p/{p.slug}",
        lambda text: db.session.scalar(sa.select(Project).where(Project.slug == text.strip())), model=Project),
    "run": Resolver(
        "agent run", lambda i: db.session.get(AgentRun, i), _run_label, lambda r: f"/runs/{r.id}",
        lambda text: None, model=AgentRun),
    "clean_result": Resolver(
        "clean result", _experiment_with_result, lambda e: f"Result of #{e.number}: {_result_title(e)}",
        lambda e: f"/experiments/{e.number}#clean-result", _find_result, model=Experiment),
    "literature": Resolver(
        "literature item", lambda i: db.session.get(LiteratureItem, i), lambda item: _literature_label(item),
        lambda item: f"/library/{item.id}", lambda text: _find_literature(text), model=LiteratureItem),
    "narrative": Resolver(
        "narrative", lambda i: db.session.get(ProjectNarrative, i), _narrative_label, _narrative_url,
        lambda text: None, model=ProjectNarrative),
}

# Record kinds a link may name whose tables are not here yet, and what brings them.
ARRIVING: dict[str, str] = {}


# Typed references of kinds registered later ("log:2026-12-01"), tried after the built-in ones:
# kind → a function that answers the record the text names, None when the text is not its form.
SHORTHANDS: dict[str, Callable[[str], object | None]] = {}


def register(kind: str, resolver: Resolver) -> None:
    """Make `kind` linkable (called by the package that brings its table)."""
    if kind not in registry.RECORD_KINDS:
        raise ValueError(f"{kind!r} is not a record kind (registry.RECORD_KINDS).")
    RESOLVERS[kind] = resolver


def register_shorthand(kind: str, find: Callable[[str], object | None]) -> None:
    """Let a reference typed without "kind:" name a record of `kind` (a later package's own form)."""
    resolver_for(kind)
    SHORTHANDS[kind] = find


def resolver_for(kind) -> Resolver:
    if kind not in registry.RECORD_KINDS:
        raise ValidationError(f"Unknown record kind {kind!r}; one of: {', '.join(registry.RECORD_KINDS)}.",
                              field="kind")
    resolver = RESOLVERS.get(kind)
    if resolver is None:
        raise ValidationError(f"Links to {kind.replace('_', ' ')} records arrive with {ARRIVING.get(kind, 'later work')}; "
                              "none can be linked yet.", field="kind")
    return resolver


def load(kind: str, record_id) -> object:
    """The record `kind`/`record_id` names; a clear error when it does not exist."""
    resolver = resolver_for(kind)
    key = record_id if isinstance(record_id, uuid.UUID) else _uuid(record_id)
    record = resolver.load(key) if key else None
    if record is None:
        raise NotFound(f"No {resolver.noun} with id {record_id}.")
    return record


@dataclass(frozen=True)
class RecordRef:
    kind: str
    id: uuid.UUID
    label: str
    url: str


def describe(kind: str, record) -> RecordRef:
    resolver = resolver_for(kind)
    return RecordRef(kind, resolver.key(record), resolver.label(record), resolver.url(record))


REFERENCE_HINT = ('Type #12 for an experiment, R12 for its clean result, B3 for a belief, T4 for a todo, '
                  'I2 for an ideation session, '
                  'a project\'s slug, '
                  'arXiv:2401.01234 or doi:10.… for a paper in the library, or kind:id (run:<uuid>, '
                  'literature:<uuid>, narrative:<uuid>), log:2026-12-01 for a day of the daily log.')


def parse_reference(text) -> RecordRef:
    """The record a typed reference names: "#12", "R12" / "#12 result", "B3", "T4", a project slug,
    or "kind:<id>" for any kind; a clear error (with the accepted forms) otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise ValidationError(f"Name the record to link. {REFERENCE_HINT}", field="target")
    text = text.strip()
    if len(text) > 200:
        raise ValidationError("That reference is too long.", field="target")
    kind, _, rest = text.partition(":")
    if rest and kind.strip() in registry.RECORD_KINDS:
        kind = kind.strip()
        resolver = resolver_for(kind)
        key = _uuid(rest)
        record = (resolver.load(key) if key else None) or resolver.find(rest)
        if record is None:
            raise NotFound(f"No {resolver.noun} {rest.strip()}.")
        return describe(kind, record)
    for kind in ("clean_result", "experiment", "belief", "literature", "project"):
        record = RESOLVERS[kind].find(text)
        if record is not None:
            return describe(kind, record)
    for kind, find in SHORTHANDS.items():
        record = find(text)
        if record is not None:
            return describe(kind, record)
    if re.fullmatch(r"#?\d+", text):
        raise NotFound(f"No experiment {text}.")
    if re.fullmatch(r"[BbRrTtIi]\d+", text):
        noun = {"b": "belief", "r": "clean result", "t": "todo", "i": "ideation session"}[text[0].lower()]
        raise NotFound(f"No {noun} {text}.")
    key = _uuid(text)
    if key is not None:
        run = RESOLVERS["run"].load(key)
        if run is not None:
            return describe("run", run)
    raise NotFound(f"Nothing is named {text!r}. {REFERENCE_HINT}")


# --- making and removing links ---------------------------------------------------------

def create_link(source: RecordRef, kind: str, target: RecordRef, actor: Actor, note: str = "") -> RecordLink:
    """Link two existing records with `kind`; refuses a link to itself and a duplicate."""
    if kind not in registry.LINK_KINDS:
        raise ValidationError(f"Unknown link kind {kind!r}; one of: {', '.join(registry.LINK_KINDS)}.",
                              field="kind")
    if not isinstance(note, str):
        raise ValidationError("note must be text.", field="note")
    if len(note) > NOTE_MAX:
        raise ValidationError(f"The note is too long: {len(note):,} characters; the limit is {NOTE_MAX:,}.",
                              field="note")
    for end in (source, target):
        load(end.kind, end.id)
    if source.kind == target.kind and source.id == target.id:
        raise ValidationError("A record cannot be linked to itself.", field="target")
    duplicate = db.session.scalar(sa.select(RecordLink.id).where(
        RecordLink.source_kind == source.kind, RecordLink.source_id == source.id,
        RecordLink.target_kind == target.kind, RecordLink.target_id == target.id, RecordLink.kind == kind))
    if duplicate is not None:
        raise Conflict(f"{source.label} already {kind.replace('_', ' ')} {target.label}.", code="duplicate_link")
    link = RecordLink(source_kind=source.kind, source_id=source.id, target_kind=target.kind, target_id=target.id,
                      kind=kind, note=note.strip(), actor_kind=actor.kind, actor_label=(actor.label or "")[:120])
    db.session.add(link)
    db.session.flush()
    return link


# What a member may name at either end of a link, and the role action that reads it: records
# that carry their project. Runs, drafts of results, narratives and day records stay the owner's.
MEMBER_LINKABLE = {"experiment": "read_experiment", "belief": "read_belief", "literature": "read_literature",
                   "project": "read_project"}


def _member_end(account, text) -> tuple[RecordRef, uuid.UUID]:
    """The record a member's typed reference names and its project, if they may read it.
    Anything else — another project's record, a kind members do not link, a record that
    does not exist — is one NotFound sentence, so the answer reveals nothing of it."""
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("Name both records: #12 for an experiment, B3 for a belief, arXiv:… or doi:… "
                              "for a paper, or a project's slug.", field="target")
    if len(text) > 200:
        raise ValidationError("That reference is too long.", field="target")
    hidden = NotFound(f"Nothing you can link is named {text.strip()!r}: name an experiment (#12), a belief (B3), "
                      "a paper (arXiv:… or doi:…) or a project (its slug) of your projects.")
    try:
        ref = parse_reference(text)
    except (NotFound, ValidationError):
        raise hidden from None
    action = MEMBER_LINKABLE.get(ref.kind)
    record = RESOLVERS[ref.kind].load(ref.id)
    if action is None or record is None or not permissions.can(account, action, record):
        raise hidden
    return ref, (record.id if isinstance(record, Project) else record.project_id)


def create_member_link(account, source_text, kind, target_text, note="") -> RecordLink:
    """A member's typed link between two records of one of their projects, marked as theirs
    (its actor is the member). Refused between two projects, even two of theirs: a link
    would show each project's record on the other's pages."""
    if not permissions.can(account, "propose_link"):
        raise NotFound("Nothing you can link is named here.")
    source, source_project = _member_end(account, source_text)
    target, target_project = _member_end(account, target_text)
    if source_project != target_project:
        raise ValidationError("Both records must be in the same project: a link would show each on the other "
                              "project's pages.", field="target")
    actor = Actor.owner(account) if account.is_owner else Actor.member(account)
    return create_link(source, kind, target, actor, note)


def get_link(link_id) -> RecordLink:
    key = _uuid(link_id)
    link = db.session.get(RecordLink, key) if key else None
    if link is None:
        raise NotFound("No such link (it may have been deleted already).")
    return link


def delete_link(link: RecordLink) -> None:
    db.session.delete(link)
    db.session.flush()


# --- reading both ways -----------------------------------------------------------------

@dataclass(frozen=True)
class LinkRow:
    """One link as seen from one of its ends: the other end's label and page (None when that
    record is gone: links are not deleted with their records)."""
    link: RecordLink
    direction: str  # "out" | "in"
    other_kind: str
    other_label: str
    other_url: str | None
    # When a page lists the links of a second record it stands for (the experiment page, its
    # clean result's), that record's label; None for the page's own record.
    own_label: str | None = None

    @property
    def phrase(self) -> str:
        return self.link.kind.replace("_", " ")


def _other(kind: str, record_id) -> tuple[str, str | None]:
    resolver = RESOLVERS.get(kind)
    record = resolver.load(record_id) if resolver else None
    if record is None:
        return f"(a {kind.replace('_', ' ')} no longer here)", None
    return resolver.label(record), resolver.url(record)


def _load_other_ends(ends) -> list:
    """Load the records (kind, id) pairs name, one query per kind, into the session, so each
    link's `load` finds its record there without a query; returns them, which keeps them
    there (the session holds what nothing else references only weakly)."""
    by_kind: dict[str, set] = {}
    for kind, record_id in ends:
        by_kind.setdefault(kind, set()).add(record_id)
    loaded = []
    for kind, ids in by_kind.items():
        model = RESOLVERS[kind].model if kind in RESOLVERS else None
        if model is not None:
            loaded += db.session.scalars(sa.select(model).where(model.id.in_(ids))).all()
    return loaded


def links_of(kind: str, record_id, *, own_label: str | None = None) -> tuple[list[LinkRow], list[LinkRow]]:
    """(outgoing, incoming) links of one record, oldest first."""
    rows = db.session.scalars(sa.select(RecordLink).where(sa.or_(
        sa.and_(RecordLink.source_kind == kind, RecordLink.source_id == record_id),
        sa.and_(RecordLink.target_kind == kind, RecordLink.target_id == record_id)))
        .order_by(RecordLink.created_at)).all()
    held = _load_other_ends((link.target_kind, link.target_id) if link.source_kind == kind
                            and link.source_id == record_id else (link.source_kind, link.source_id) for link in rows)
    outgoing, incoming = [], []
    for link in rows:
        if link.source_kind == kind and link.source_id == record_id:
            outgoing.append(LinkRow(link, "out", link.target_kind, *_other(link.target_kind, link.target_id),
                                    own_label))
        else:
            incoming.append(LinkRow(link, "in", link.source_kind, *_other(link.source_kind, link.source_id),
                                    own_label))
    del held  # the loaded records stayed in the session until every label was made
    return outgoing, incoming


@dataclass(frozen=True)
class MemberLinkRow:
    """A link as a member sees it from one of their records: the other end's label and its
    member page (under /m/)."""
    phrase: str
    direction: str  # "out" | "in"
    other_label: str
    other_url: str
    by_member: str | None  # the member who made it, if a member did


def _member_url(kind: str, record, slug: str) -> str:
    if kind == "experiment":
        return f"/m/{slug}/experiments/{record.number}"
    return f"/m/{slug}" + {"belief": "#beliefs", "literature": "#literature"}.get(kind, "")


def member_links_of(account, kind: str, record_id) -> list[MemberLinkRow]:
    """One record's links, both ways, as `account` may see them: only those whose other end is
    a record their role reads in their projects (a link the owner made to a run, a draft or
    another project's record is left out, so nothing of it shows)."""
    outgoing, incoming = links_of(kind, record_id)
    shown = []
    for row in outgoing + incoming:
        other_id = row.link.target_id if row.direction == "out" else row.link.source_id
        action = MEMBER_LINKABLE.get(row.other_kind)
        record = RESOLVERS[row.other_kind].load(other_id) if action else None
        if record is None or not permissions.can(account, action, record):
            continue
        project = record if isinstance(record, Project) else db.session.get(Project, record.project_id)
        shown.append(MemberLinkRow(row.phrase, row.direction, row.other_label,
                                   _member_url(row.other_kind, record, project.slug),
                                   row.link.actor_label if row.link.actor_kind == "member" else None))
    return shown


@dataclass(frozen=True)
class LinkPanel:
    """What templates/links/_panel.html shows for one record."""
    record: RecordRef
    outgoing: list[LinkRow]
    incoming: list[LinkRow]
    kinds: list[str]
    hint: str = REFERENCE_HINT


def panel(kind: str, record_id) -> LinkPanel:
    """The links panel of one record: its links both ways and what the add form offers."""
    record = describe(kind, load(kind, record_id))
    outgoing, incoming = links_of(record.kind, record.id)
    if kind == "experiment":
        # An experiment's clean result has no page of its own: its links show on the experiment's.
        result_out, result_in = links_of("clean_result", record.id, own_label="Its clean result")
        outgoing, incoming = outgoing + result_out, incoming + result_in
    return LinkPanel(record, outgoing, incoming, registry.LINK_KINDS)


def beliefs_linked_to(kind: str, record_id) -> list[tuple[RecordLink, Belief]]:
    """The beliefs a record is linked with, either way (an experiment's "tests B3")."""
    out = sa.select(RecordLink, Belief).join(Belief, Belief.id == RecordLink.target_id).where(
        RecordLink.source_kind == kind, RecordLink.source_id == record_id, RecordLink.target_kind == "belief")
    back = sa.select(RecordLink, Belief).join(Belief, Belief.id == RecordLink.source_id).where(
        RecordLink.target_kind == kind, RecordLink.target_id == record_id, RecordLink.source_kind == "belief")
    return [(link, belief) for link, belief in db.session.execute(out).all() + db.session.execute(back).all()]
