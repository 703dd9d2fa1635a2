"""Weekly reviews (SPEC §12.3): the list, one review to read, edit, publish and share, and
"Draft this week now" (queued as a job). Views are thin; services.day.weekly_review does the work."""
from __future__ import annotations

from flask import Blueprint, make_response, redirect, render_template, request, url_for

from blueprints import access
from blueprints._actions import perform, stash_for, take_stash
from models import db
from services.core import registry
from services.core.errors import NotFound, ValidationError
from services.day import daily_log, weekly_review
from services.results import shares
from services.workflow import runs

bp = Blueprint("reviews", __name__)
PAGE_SIZE = 30
_SHARE_STASH = "review-share"


@bp.get("/reviews")
@access.owner
def index():
    """The newest reviews, when the next is drafted, and "Draft this week now"."""
    day, hour = weekly_review.schedule()
    this_week = weekly_review.week_end_for(daily_log.today())
    return render_template("reviews/index.html", reviews=weekly_review.newest(PAGE_SIZE), day=day, hour=hour,
                           this_week=this_week, this_week_review=weekly_review.by_week(this_week),
                           time_zone=str(daily_log.owner_zone()))


@bp.post("/reviews/draft")
@access.owner
def draft():
    """Queue drafting this week's review (or `week`, a review day); the page of that week
    follows it. A week drafted already is only shown: drafting is once per week."""
    raw = request.form.get("week") or weekly_review.week_end_for(daily_log.today()).isoformat()

    week_end = weekly_review.parse_week(raw)  # a bad week: 400 with the sentence, nothing queued
    if weekly_review.by_week(week_end) is None:
        weekly_review.enqueue_draft(week_end)
    return redirect(url_for("reviews.detail", key=week_end.isoformat()), code=303)


def _review_or_week(key: str):
    """(review or None, week_end): a review by id or week; a week not drafted yet is an empty page."""
    try:
        return weekly_review.get_review(key), None
    except NotFound:
        try:
            return None, weekly_review.parse_week(key)
        except ValidationError as exc:
            raise NotFound(f"No weekly review {key[:40]}: {exc.message}")


def _page(key: str, *, status_code: int = 200, error=None, draft_text: str | None = None, base=None,
          classify_error: tuple[str, str] | None = None):
    review, week_end = _review_or_week(key)
    if review is None:
        return make_response(render_template("reviews/empty.html", week_end=week_end,
                                             drafting=weekly_review.drafting(week_end)), status_code)
    rows = weekly_review.versions(review)
    latest = rows[0] if rows else None
    public = next((row for row in rows if row.status == "published"), None)
    stashed = take_stash(f"{_SHARE_STASH}:{review.id}")
    links = shares.list_links(weekly_review_id=review.id)
    new_share = None
    if stashed.get("link_id"):
        link = next((row for row in links if str(row.id) == stashed["link_id"]), None)
        new_share = {"link": link, "url": stashed["url"]} if link else None
    context = {
        "review": review, "versions": rows, "latest": latest, "published": public,
        "latest_html": weekly_review.render_markdown(latest.body_md) if latest else "",
        "draft": draft_text if draft_text is not None else (latest.body_md if latest else ""),
        "base_version": base if base is not None else (latest.version if latest else 0),
        "error": error, "runs": weekly_review.week_runs(review), "share_links": links, "new_share": new_share,
        "share_error": stashed.get("error"), "week_start": weekly_review.week_start(review),
        "spend": review.summary.get("spend", {}), "classify_error": classify_error,
        "classifications": registry.RUN_CLASSIFICATIONS,
    }
    response = make_response(render_template("reviews/detail.html", **context), status_code)
    response.headers["Cache-Control"] = "no-store"  # it may carry a new share link's secret
    return response


@bp.get("/reviews/<key>")
@access.owner
def detail(key: str):
    """One review (by id or by its week's last day): its newest text, the editor, versions,
    the week's runs to classify, and its share links."""
    return _page(key)


@bp.post("/reviews/<key>/versions")
@access.owner
def save(key: str):
    """Save the edited text as a new version; an edit made on an older version is refused (409)
    with the text kept, so nothing typed is lost."""
    review = weekly_review.get_review(key)
    body, base = request.form.get("body_md", ""), request.form.get("base_version", "")

    def refused(exc):
        return _page(key, status_code=exc.status_code if exc.status_code in (409, 413) else 422, error=exc,
                     draft_text=body, base=base)

    return perform(lambda: weekly_review.save_version(review, body, access.actor(), base_version=base),
                   refused=refused, done=lambda: redirect(url_for("reviews.detail", key=key), code=303))


@bp.post("/reviews/<key>/versions/<int:version>/publish")
@access.owner
def publish(key: str, version: int):
    """Publish this version (what its share links show from now on); the one before is archived."""
    review = weekly_review.get_review(key)
    return perform(lambda: weekly_review.publish(review, version, access.actor()), keyed=False,
                   done=lambda: redirect(url_for("reviews.detail", key=key) + "#published", code=303))


@bp.post("/reviews/<key>/mentors")
@access.owner
def show_to_mentors(key: str):
    """Show this review's published version to mentor accounts (`shown=1`) or stop (`shown=0`).
    Off by default: a review spans every project, and mentors' accounts are scoped to theirs."""
    review = weekly_review.get_review(key)
    choice = request.form.get("shown", "")
    if choice not in ("0", "1"):
        raise ValidationError("Say whether to show this review to mentor accounts (shown=1) or not (shown=0).",
                              field="shown")
    return perform(lambda: weekly_review.show_to_mentors(review, choice == "1"), keyed=False,
                   done=lambda: redirect(url_for("reviews.detail", key=key) + "#mentors", code=303))


@bp.post("/reviews/<key>/share-links")
@access.owner
def create_share_link(key: str):
    """A link that shows a mentor this review's published version; shown once (only a hash is kept)."""
    review = weekly_review.get_review(key)
    form = request.form
    stash = f"{_SHARE_STASH}:{review.id}"

    def create():
        link, token = shares.create_link(scope="weekly_review", weekly_review=review, label=form.get("label", ""),
                                         expires_in_days=form.get("expires_in_days"))
        db.session.flush()
        stash_for(stash, {"link_id": str(link.id), "url": url_for("share.view", token=token, _external=True)})

    def refused(exc):
        stash_for(stash, {"error": exc.message})
        return redirect(url_for("reviews.detail", key=key) + "#share", code=303)

    return perform(create, refused=refused, done=lambda: redirect(url_for("reviews.detail", key=key) + "#share",
                                                                  code=303))


@bp.post("/reviews/<key>/runs/<run_id>/classification")
@access.owner
def classify_run(key: str, run_id: str):
    """Classify one of the week's runs from the review (the run page has the same choice);
    a bad value re-shows the review with the sentence and changes nothing."""
    review = weekly_review.get_review(key)
    run = runs.get_run(run_id)
    return perform(lambda: runs.classify(run, request.form.get("classification"), "owner"), keyed=False,
                   refused=lambda exc: _page(key, status_code=422, classify_error=(str(run.id), exc.message)),
                   done=lambda: redirect(url_for("reviews.detail", key=review.week_end.isoformat()) + "#runs",
                                         code=303))
