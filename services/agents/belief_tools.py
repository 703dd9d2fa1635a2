"""Tools over the research record's beliefs and links (SPEC §11.2): agents read beliefs
(`search_beliefs`, `read_belief`), propose an update for the owner (`propose_belief_update`)
and link their experiment to the records it bears on (`add_link`).

An agent never changes a belief: `propose_belief_update` records a proposal that waits for
the owner. Links an agent adds start at the run's own experiment (or its clean result), so a
run writes only about its own work; the other end may be any record that exists.
"""
from __future__ import annotations

import json

from services.agents.toolkit import ToolContext, ToolResult, tool
from services.core import registry
from services.core.errors import ValidationError
from services.core.redact import redact
from services.research import beliefs, links

SEARCH_LIMIT = 50
VERSIONS_SHOWN = 10
TEXT_SHOWN = 20_000


def _json(data) -> str:
    return json.dumps(data, indent=1, default=str)


def _clip(text: str) -> str:
    return text if len(text) <= TEXT_SHOWN else text[:TEXT_SHOWN] + f"\n… [{len(text) - TEXT_SHOWN:,} characters cut]"


def _summary(belief) -> dict:
    return {"cite": beliefs.label(belief.number), "title": belief.title, "status": belief.status,
            "confidence": belief.confidence, "version": belief.version,
            "belief": (belief.current_belief or "")[:300] or None}


@tool("search_beliefs", "Find beliefs by words in their title, text or evidence (every word must match), by status, "
                        "by project slug, or the ones linked to this run's experiment (`linked`: true); most "
                        "recently changed first. Cite them as B<number>.",
      {"text": {"type": "string", "maxLength": 300}, "status": {"type": "string", "enum": registry.BELIEF_STATUSES},
       "project": {"type": "string", "maxLength": 80, "description": "a project's slug"},
       "linked": {"type": "boolean", "description": "only beliefs linked to this run's experiment (e.g. it tests)"},
       "limit": {"type": "integer", "description": f"at most {SEARCH_LIMIT}; default 20"}})
def search_beliefs(ctx: ToolContext, data: dict) -> ToolResult:
    limit = max(1, min(int(data.get("limit") or 20), SEARCH_LIMIT))
    if data.get("linked"):
        experiment = ctx.need_experiment()
        found = [{**_summary(belief), "link": f"#{experiment.number} {link.kind.replace('_', ' ')} "
                                              f"{beliefs.label(belief.number)}"
                  if link.source_kind == "experiment" else
                  f"{beliefs.label(belief.number)} {link.kind.replace('_', ' ')} #{experiment.number}"}
                 for link, belief in links.beliefs_linked_to("experiment", experiment.id)][:limit]
        if not found:
            return ToolResult(f"No belief is linked to #{experiment.number}.")
        return ToolResult(redact(_json({"beliefs": found})))
    if data.get("project"):
        beliefs.find_project(data["project"])  # a clear error for a slug that names no project
    filters = beliefs.BeliefFilters(project=data.get("project") or "", status=data.get("status") or "")
    rows = beliefs.belief_list(filters, text=data.get("text") or "", limit=limit + 1)
    if not rows:
        return ToolResult("No belief matches. Try fewer or other words.")
    answer = {"beliefs": [_summary(b) for b in rows[:limit]]}
    if len(rows) > limit:
        answer["more"] = f"More beliefs match; these are the {limit} most recently changed."
    return ToolResult(redact(_json(answer)))


@tool("read_belief", "One belief by B<number>: its text, status, confidence, evidence, counterevidence, next test, "
                     "its version (give it as based_on_version when you propose an update), recent versions, a "
                     "pending proposal, and its links.",
      {"belief": {"type": "string", "maxLength": 20, "description": "B<number>, e.g. B3"}}, ["belief"])
def read_belief(ctx: ToolContext, data: dict) -> ToolResult:
    belief = beliefs.get_belief(data["belief"])
    outgoing, incoming = links.links_of("belief", belief.id)
    record = {
        **_summary(belief), "belief": _clip(belief.current_belief), "evidence": _clip(belief.evidence),
        "counterevidence": _clip(belief.counterevidence), "nextTest": _clip(belief.next_test),
        "history": [{"version": e.version.version, "changes": e.changes, "by": e.version.author_label,
                     "experiment": f"#{e.experiment_number}" if e.experiment_number else None,
                     "why": (e.version.reasoning_md or "")[:500] or None}
                    for e in beliefs.timeline(belief)[:VERSIONS_SHOWN]],
        "pendingProposals": [{"status": p.proposal.proposed_status, "confidence": p.proposal.proposed_confidence,
                              "basedOnVersion": p.proposal.based_on_version,
                              "experiment": f"#{p.experiment_number}" if p.experiment_number else None}
                             for p in beliefs.pending_proposals(belief=belief)],
        "links": [f"{beliefs.label(belief.number)} {r.phrase} {r.other_label}" for r in outgoing]
        + [f"{r.other_label} {r.phrase} {beliefs.label(belief.number)}" for r in incoming],
    }
    return ToolResult(redact(_json(record)))


@tool("propose_belief_update", "Propose an update to a belief this experiment's result bears on: the new status, "
                               "confidence and text, the result as evidence (cite #<number>), and your reasoning. "
                               "The owner accepts, edits or rejects it; the belief does not change until then. "
                               "A newer proposal replaces your pending one.",
      {"belief": {"type": "string", "maxLength": 20, "description": "B<number>"},
       "status": {"type": "string", "enum": registry.BELIEF_STATUSES},
       "confidence": {"type": "string", "enum": registry.CONFIDENCES},
       "text": {"type": "string", "maxLength": beliefs.TEXT_MAX, "description": "the belief as it should read"},
       "evidence": {"type": "string", "maxLength": beliefs.TEXT_MAX},
       "reasoning": {"type": "string", "maxLength": beliefs.TEXT_MAX},
       "based_on_version": {"type": "integer", "description": "the version read_belief showed you"}},
      ["belief", "status", "confidence", "text", "reasoning", "based_on_version"])
def propose_belief_update(ctx: ToolContext, data: dict) -> ToolResult:
    belief = beliefs.get_belief(data["belief"])
    proposal = beliefs.propose_update(belief, ctx.experiment, ctx.run, status=data["status"],
                                      confidence=data["confidence"], text=data["text"],
                                      evidence=data.get("evidence") or "", reasoning=data["reasoning"],
                                      based_on_version=data["based_on_version"])
    note = "" if proposal.based_on_version == belief.version else \
        f" It was made against version {proposal.based_on_version}; the belief is at {belief.version}, so the " \
        "owner will review it against the newer text."
    return ToolResult(f"Proposed an update to {beliefs.label(belief.number)} ({belief.status} → "
                      f"{proposal.proposed_status}, {proposal.proposed_confidence}); it waits for the owner.{note}")


@tool("add_link", "Link this run's experiment (or, with from_result, its clean result) to another record: "
                  "`kind` is how it relates (tests, supports, contradicts, …), `target` names the record: "
                  "#12 (experiment), R12 (its clean result), B3 (belief), a project's slug, or kind:<id>.",
      {"kind": {"type": "string", "enum": registry.LINK_KINDS},
       "target": {"type": "string", "maxLength": 200},
       "from_result": {"type": "boolean", "description": "link from this experiment's clean result"},
       "note": {"type": "string", "maxLength": links.NOTE_MAX}},
      ["kind", "target"])
def add_link(ctx: ToolContext, data: dict) -> ToolResult:
    experiment = ctx.need_experiment()
    kind = "clean_result" if data.get("from_result") else "experiment"
    if kind == "clean_result" and not experiment.has_clean_result:
        raise ValidationError(f"#{experiment.number} has no clean result yet; write it first, or link from the "
                              "experiment.", field="from_result")
    source = links.describe(kind, links.load(kind, experiment.id))
    target = links.parse_reference(data["target"])
    links.create_link(source, data["kind"], target, ctx.actor, data.get("note") or "")
    return ToolResult(f"Linked: {source.label} {data['kind'].replace('_', ' ')} {target.label}.")
