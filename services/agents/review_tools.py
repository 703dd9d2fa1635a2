"""The weekly-review agent's tools (agents/weekly-review.md): its run is scoped to one weekly
review. It reads the week the draft was written from, saves its own draft as the review's next
version (the owner edits and publishes; the agent never publishes), and suggests how useful
each of the week's runs was — a suggestion the owner's own classification always overrides."""
from __future__ import annotations

import json

from models import WeeklyReview, db
from services.agents.toolkit import ToolContext, ToolResult, tool
from services.core import registry
from services.core.errors import ValidationError
from services.core.redact import redact
from services.day import weekly_review
from services.workflow import runs

CLASSIFY_MAX = 200


def scoped_review(ctx: ToolContext) -> WeeklyReview:
    """The weekly review the run was started on."""
    review = db.session.get(WeeklyReview, ctx.run.scope_id) if ctx.run.scope_kind == weekly_review.SCOPE else None
    if review is None:
        raise ValidationError("This run is not about a weekly review.")
    return review


@tool("read_weekly_review", "The week this review covers, as the record tells it (results with confidence, belief "
                            "changes, failures with reasons, spend, proposals), the review's newest text, and the "
                            "week's agent runs with their cost and classification.")
def read_weekly_review(ctx: ToolContext, data: dict) -> ToolResult:
    review = scoped_review(ctx)
    current = weekly_review.latest(review)
    return ToolResult(redact(json.dumps({
        "weekEnd": review.week_end.isoformat(), "record": review.summary,
        "latestVersion": current.version if current else None, "text": current.body_md if current else "",
        "runs": [run for run in weekly_review.week_runs(review) if run["id"] != str(ctx.run.id)],
    }, indent=1, default=str)))


@tool("write_weekly_review", "Save the review's text (markdown) as its next draft version; the owner edits and "
                             "publishes. Cite every claim's experiments as #N.",
      {"body_md": {"type": "string", "maxLength": 60_000}}, ["body_md"])
def write_weekly_review(ctx: ToolContext, data: dict) -> ToolResult:
    review = scoped_review(ctx)
    row = weekly_review.save_version(review, data["body_md"], ctx.actor)
    return ToolResult(f"Saved version {row.version} of the review of the week ending {review.week_end}.")


@tool("classify_runs", "Suggest whether each of the week's agent runs was worth its cost: useful, not_useful, "
                       "archived or pending. A run the owner classified keeps the owner's choice.",
      {"runs": {"type": "array", "maxItems": CLASSIFY_MAX, "items": {
          "type": "object", "properties": {"id": {"type": "string"},
                                           "classification": {"type": "string", "enum": registry.RUN_CLASSIFICATIONS}},
          "required": ["id", "classification"]}}}, ["runs"])
def classify_runs(ctx: ToolContext, data: dict) -> ToolResult:
    review = scoped_review(ctx)
    in_week = {run["id"] for run in weekly_review.week_runs(review)}
    applied, kept = 0, 0
    for entry in data["runs"]:
        if entry["id"] not in in_week:
            raise ValidationError(f"Run {entry['id'][:40]} is not one of this week's runs.", field="runs")
        if runs.classify(runs.get_run(entry["id"]), entry["classification"], "agent"):
            applied += 1
        else:
            kept += 1
    return ToolResult(f"Classified {applied} run(s)" + (f"; {kept} kept the owner's classification." if kept else "."))
