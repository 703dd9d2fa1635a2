"""Weekly reviews (SPEC §12.3): list, read, draft (queued), save a version, publish."""
from __future__ import annotations

from blueprints import access
from blueprints._actions import commit_then_run
from blueprints.api._common import Routes, body_fields, int_arg
from services.core.errors import ValidationError
from services.day import daily_log, weekly_review

routes = Routes()


def _refuse_unknown(data: dict, known: set[str]) -> None:
    unknown = sorted(set(data) - known)
    if unknown:
        raise ValidationError(f"Unknown field(s): {', '.join(map(str, unknown))[:200]}.", field=str(unknown[0]))


@routes.get("/reviews")
@access.api("read")
def list_reviews():
    """The newest reviews, newest week first (`limit` 1–200, `offset`)."""
    found = weekly_review.newest(int_arg("limit", 30, 1, 200), int_arg("offset", 0, 0, 1_000_000))
    return {"reviews": weekly_review.list_json(found)}


@routes.get("/reviews/<key>")
@access.api("read")
def get_review(key: str):
    """One review by id or by its week's last day (YYYY-MM-DD): the record, newest text, versions."""
    return {"review": weekly_review.to_json(weekly_review.get_review(key))}


@routes.post("/reviews")
@access.api("write")
def draft_review():
    """Draft the week ending `week` (a review day; default this week) from the record, queued
    as a job: 202 with `queued`; a week drafted already answers 200 with its review."""
    data = body_fields(("week",))
    _refuse_unknown(data, {"week"})
    week_end = weekly_review.parse_week(data["week"]) if "week" in data \
        else weekly_review.week_end_for(daily_log.today())
    existing = weekly_review.by_week(week_end)
    if existing is not None:
        return {"queued": False, "review": weekly_review.to_json(existing, full=False)}
    weekly_review.enqueue_draft(week_end)
    return {"queued": True, "weekEnd": week_end.isoformat()}, 202


@routes.post("/reviews/<key>/versions")
@access.api("write")
def save_version(key: str):
    """Save `bodyMd` as the review's next version; `baseVersion` (the version edited) makes a
    stale edit a 409 instead of a silent overwrite."""
    data = body_fields(("body_md", "base_version"))
    _refuse_unknown(data, {"body_md", "base_version"})
    review = weekly_review.get_review(key)
    row = weekly_review.save_version(review, data.get("body_md"), access.actor(),
                                     base_version=data.get("base_version"))
    commit_then_run()
    return {"version": weekly_review.version_json(row), "review": weekly_review.to_json(review, full=False)}, 201


@routes.post("/reviews/<key>/publish")
@access.api("write")
def publish(key: str):
    """Publish `version` (what the review's share links show); the one published before is archived."""
    data = body_fields(("version",))
    _refuse_unknown(data, {"version"})
    if "version" not in data:
        raise ValidationError("Name the version to publish.", field="version")
    review = weekly_review.get_review(key)
    row = weekly_review.publish(review, data["version"], access.actor())
    commit_then_run()
    return {"version": weekly_review.version_json(row), "review": weekly_review.to_json(review, full=False)}
