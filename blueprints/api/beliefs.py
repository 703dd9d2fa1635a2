"""Beliefs, their proposed updates, and typed links (SPEC §11.2).

A belief's `ref` is "B12", 12 or its uuid. Accepting or rejecting a proposed update is the
owner's alone (`owner_api`: the owner's session, never a token), because Claude never
changes a belief without the owner and a token acts as an agent (SPEC §2.3).
"""
from __future__ import annotations

from flask import request

from blueprints import access
from blueprints._actions import commit_then_run
from blueprints.api._common import Routes, body_fields, id_text, int_arg, iso
from models.research import Belief, BeliefProposal, BeliefVersion, RecordLink
from services.core import registry
from services.core.errors import ValidationError
from services.research import beliefs, links

routes = Routes()

BELIEF_FIELDS = beliefs.EDITABLE_FIELDS + ("reasoning", "experiment", "expected_version")
ACCEPT_FIELDS = ("current_belief", "status", "confidence", "evidence", "counterevidence", "next_test", "reasoning",
                 "expected_version")
LINK_FIELDS = ("source", "source_kind", "source_id", "kind", "target", "target_kind", "target_id", "note")


def belief_json(b: Belief) -> dict:
    return {"id": str(b.id), "number": b.number, "cite": beliefs.label(b.number), "title": b.title,
            "currentBelief": b.current_belief, "evidence": b.evidence, "counterevidence": b.counterevidence,
            "nextTest": b.next_test, "status": b.status, "confidence": b.confidence, "version": b.version,
            "projectId": id_text(b.project_id), "createdAt": iso(b.created_at), "updatedAt": iso(b.updated_at)}


def version_json(v: BeliefVersion, experiment_number: int | None = None) -> dict:
    return {"version": v.version, "title": v.title, "currentBelief": v.current_belief, "evidence": v.evidence,
            "counterevidence": v.counterevidence, "nextTest": v.next_test, "status": v.status,
            "confidence": v.confidence, "reasoning": v.reasoning_md, "authorKind": v.author_kind,
            "authorLabel": v.author_label, "experimentNumber": experiment_number,
            "proposalId": id_text(v.proposal_id), "createdAt": iso(v.created_at)}


def proposal_json(p: BeliefProposal, belief: Belief) -> dict:
    return {"id": str(p.id), "status": p.status, "basedOnVersion": p.based_on_version,
            "stale": p.status == "pending" and beliefs.is_stale(belief, p),
            "proposedStatus": p.proposed_status, "proposedConfidence": p.proposed_confidence,
            "proposedText": p.proposed_text, "evidence": p.evidence_md, "reasoning": p.reasoning_md,
            "experimentId": id_text(p.experiment_id), "agentRunId": id_text(p.agent_run_id),
            "resolutionNote": p.resolution_note, "resolvedAt": iso(p.resolved_at), "createdAt": iso(p.created_at)}


def link_json(link: RecordLink) -> dict:
    return {"id": str(link.id), "kind": link.kind, "sourceKind": link.source_kind, "sourceId": str(link.source_id),
            "targetKind": link.target_kind, "targetId": str(link.target_id), "note": link.note,
            "actorKind": link.actor_kind, "actorLabel": link.actor_label, "createdAt": iso(link.created_at)}


def _expected_version(data: dict) -> int | None:
    value = data.pop("expected_version", None)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise ValidationError("expectedVersion must be a whole number.", field="expected_version")
    return value


@routes.get("/beliefs")
@access.api("read")
def list_beliefs():
    """Beliefs, most recently changed first; `project` (slug), `status`, `q` (words), `limit` 1–500."""
    status = request.args.get("status") or ""
    if status and status not in registry.BELIEF_STATUSES:
        raise ValidationError(f"status must be one of: {', '.join(registry.BELIEF_STATUSES)}.",
                              field="status")
    if request.args.get("project"):
        beliefs.find_project(request.args["project"])
    filters = beliefs.BeliefFilters(project=request.args.get("project") or "", status=status)
    found = beliefs.belief_list(filters, text=(request.args.get("q") or "")[:300], limit=int_arg("limit", 100, 1, 500))
    return {"beliefs": [belief_json(b) for b in found]}


@routes.post("/beliefs")
@access.api("write")
def create_belief():
    """Create a belief (`title` required); answers 201 with it."""
    data = body_fields(BELIEF_FIELDS)
    data.pop("expected_version", None)
    belief = beliefs.create_belief(data, access.actor())
    commit_then_run()
    return {"belief": belief_json(belief)}, 201


@routes.get("/beliefs/<ref>")
@access.api("read")
def get_belief(ref: str):
    """One belief with its versions (newest first), pending proposals and links both ways."""
    belief = beliefs.get_belief(ref)
    outgoing, incoming = links.links_of("belief", belief.id)
    return {"belief": belief_json(belief),
            "versions": [version_json(e.version, e.experiment_number) for e in beliefs.timeline(belief)],
            "pendingProposals": [proposal_json(p.proposal, belief) for p in beliefs.pending_proposals(belief=belief)],
            "links": {"outgoing": [link_json(r.link) for r in outgoing],
                      "incoming": [link_json(r.link) for r in incoming]}}


@routes.patch("/beliefs/<ref>")
@access.api("write")
def patch_belief(ref: str):
    """Edit a belief: a new version (with `reasoning`, `experiment` "#12"); `expectedVersion` guards
    against a change made since it was read (409)."""
    belief = beliefs.get_belief(ref)
    data = body_fields(BELIEF_FIELDS)
    expected = _expected_version(data)
    changed = beliefs.edit_belief(belief, data, access.actor(), expected_version=expected)
    commit_then_run()
    return {"ok": True, "changed": changed, "belief": belief_json(belief)}


@routes.get("/beliefs/<ref>/proposals")
@access.api("read")
def list_proposals(ref: str):
    """Every proposed update of a belief, newest first (`status` filters)."""
    belief = beliefs.get_belief(ref)
    status = request.args.get("status") or None
    found = [p for p in beliefs.proposals(belief) if status is None or p.status == status]
    return {"proposals": [proposal_json(p, belief) for p in found]}


@routes.post("/beliefs/<ref>/proposals/<proposal_id>/accept")
@access.owner_api
def accept_proposal(ref: str, proposal_id: str):
    """Accept a proposal as proposed, or with edits in the body; a stale one needs `expectedVersion`
    equal to the belief's current version (409 otherwise)."""
    belief = beliefs.get_belief(ref)
    proposal = beliefs.get_proposal(belief, proposal_id)
    data = body_fields(ACCEPT_FIELDS) if request.data else {}
    unknown = sorted(set(data) - set(ACCEPT_FIELDS))
    if unknown:
        raise ValidationError(f"Unknown field(s): {', '.join(unknown)}.", field=unknown[0])
    expected = _expected_version(data)
    version = beliefs.accept_proposal(belief, proposal, access.actor(), edits=data or None, expected_version=expected)
    commit_then_run()
    return {"ok": True, "belief": belief_json(belief), "version": version_json(version),
            "proposal": proposal_json(proposal, belief)}


@routes.post("/beliefs/<ref>/proposals/<proposal_id>/reject")
@access.owner_api
def reject_proposal(ref: str, proposal_id: str):
    """Reject a proposal, with an optional `note`; the belief is unchanged."""
    belief = beliefs.get_belief(ref)
    proposal = beliefs.get_proposal(belief, proposal_id)
    data = body_fields(("note",)) if request.data else {}
    unknown = sorted(set(data) - {"note"})
    if unknown:
        raise ValidationError(f"Unknown field(s): {', '.join(unknown)}; send note.", field=unknown[0])
    beliefs.reject_proposal(belief, proposal, access.actor(), data.get("note", ""))
    commit_then_run()
    return {"ok": True, "proposal": proposal_json(proposal, belief)}


# --- links -------------------------------------------------------------------------------

def _end(data: dict, side: str) -> links.RecordRef:
    """One end of a link: `source`/`target` as typed text ("#12", "B3", a slug), or
    `<side>Kind` + `<side>Id`."""
    kind, record_id = data.get(f"{side}_kind"), data.get(f"{side}_id")
    if kind is not None or record_id is not None:
        if not isinstance(kind, str) or not isinstance(record_id, str):
            raise ValidationError(f"Send {side}Kind and {side}Id together, as text.", field=f"{side}_kind")
        return links.describe(kind, links.load(kind, record_id))
    try:
        return links.parse_reference(data.get(side))
    except ValidationError as exc:
        raise ValidationError(exc.message, field=side) from None


@routes.get("/links")
@access.api("read")
def list_links():
    """The links of one record (`kind`, `id`), both ways."""
    kind = request.args.get("kind", "")
    record = links.describe(kind, links.load(kind, request.args.get("id", "")))
    outgoing, incoming = links.links_of(record.kind, record.id)
    return {"record": {"kind": record.kind, "id": str(record.id), "label": record.label},
            "outgoing": [link_json(r.link) | {"otherLabel": r.other_label} for r in outgoing],
            "incoming": [link_json(r.link) | {"otherLabel": r.other_label} for r in incoming]}


@routes.post("/links")
@access.api("write")
def create_link():
    """Link two existing records: `kind`, `source` and `target` (or their Kind/Id), `note`; 201."""
    data = body_fields(LINK_FIELDS)
    unknown = sorted(set(data) - set(LINK_FIELDS))
    if unknown:
        raise ValidationError(f"Unknown field(s): {', '.join(unknown)}.", field=unknown[0])
    source, target = _end(data, "source"), _end(data, "target")
    link = links.create_link(source, data.get("kind"), target, access.actor(), data.get("note") or "")
    commit_then_run()
    return {"link": link_json(link)}, 201


@routes.route("DELETE", "/links/<link_id>")
@access.api("write")
def delete_link(link_id: str):
    """Delete a link."""
    links.delete_link(links.get_link(link_id))
    commit_then_run()
    return {"ok": True}
