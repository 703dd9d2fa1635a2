"""The mentor's read-only view behind a share link: `/s/<token>` (SPEC §8.5).

Stateless: no session cookie is read or set on these paths (StatelessShareSessions), the
templates have their own base (no csrf_token(), no current_user, no dashboard links, no
forms) and every answer — 404 and 429 included — carries noindex, no-referrer and no-store.
Unknown, revoked and expired tokens all get the same 404 page.
"""
from __future__ import annotations

from flask import Blueprint, Flask, make_response, render_template, request, url_for
from flask.sessions import SecureCookieSessionInterface

from blueprints import access
from blueprints.metrics import chart_json
from services.core import sanitize
from services.core.errors import RateLimited
from services.day import weekly_review
from services.dispatch import metrics
from services.planning import discussion
from services.research import narratives, projects
from services.results.result_lint import confidence_of, title_without_confidence
from services.results import results, shares

bp = Blueprint("share", __name__, url_prefix="/s")

PREFIX = "/s/"
SHARE_HEADERS = {
    "X-Robots-Tag": "noindex, nofollow, noarchive",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store, private",
}


class StatelessShareSessions(SecureCookieSessionInterface):
    """The normal cookie session everywhere but under /s/, where none is read or written."""

    def open_session(self, app, request):
        if request.path.startswith(PREFIX):
            return self.session_class()
        return super().open_session(app, request)

    def save_session(self, app, session, response):
        from flask import request as current_request
        if current_request.path.startswith(PREFIX):
            return None
        return super().save_session(app, session, response)


def init_app(app: Flask) -> None:
    app.session_interface = StatelessShareSessions()


@bp.after_request
def share_headers(response):
    for name, value in SHARE_HEADERS.items():
        response.headers[name] = value
    return response


def _not_found():
    return make_response(render_template("share/not_found.html"), 404)


def _open(token: str, *, count_view: bool = True):
    """(link, None) for a live link, else (None, the response to send). The charts' data
    requests are part of a page view already counted (`count_view=False`)."""
    try:
        shares.check_rate(request.remote_addr)
    except RateLimited as exc:
        return None, make_response(render_template("share/message.html", title="Slow down",
                                                   message=exc.message), 429, {"Retry-After": "60"})
    link = shares.resolve(token)
    if link is None:
        return None, _not_found()
    if count_view:
        shares.record_view(link)
    return link, None


def _result_context(link, token: str, shared, *, listed: bool) -> dict:
    """The result page as promoted: its frozen title, body and figures, and the charts of
    the runs it was promoted with (pods started by then; a rerun after it is not shared)."""
    experiment, promotion = shared.experiment, shared.promotion
    comments = discussion.thread("experiment", experiment.id).comments if link.include_comments else []
    figures = results.figures(experiment, only=promotion.figure_ids)
    texts = {"result": promotion.body, **{c.id: c.body_html for c in comments},
             **{("figure", f.id): f.html for f in figures if f.html}}
    readable = _links_for_reader(link, token, texts)
    for figure in figures:
        if figure.html:
            figure.html = readable.pop(("figure", figure.id))
    data_url = (url_for("share.result_metrics", token=token, number=experiment.number) if listed
                else url_for("share.view_metrics", token=token))
    return {"link": link, "experiment": experiment, "token": token, "listed": listed,
            **metrics.page_context(experiment, pods_until=promotion.promoted_at), "metrics_data_url": data_url,
            "metrics_refresh": None, "result_title": title_without_confidence(promotion.title),
            "confidence": confidence_of(promotion.title), "figures": figures,
            "result_body": readable.pop("result"), "comments": comments, "comment_bodies": readable}


def _nothing_shared_yet():
    """A live one-experiment link whose experiment has no result promoted to `shared`: the
    link works, so say so — and nothing about the experiment, which is not shared."""
    return render_template("share/message.html", title="Nothing shared yet",
                           message="The result behind this link has not been shared yet. The link will show it "
                                   "once its owner promotes it; try again later.")


def _charts(shared):
    """A shared result's chart data (`?name=`), as its page draws it; 404 for nothing shared."""
    if shared is None:
        return _not_found()
    return chart_json(shared.experiment, request.args.get("name"), pods_until=shared.promotion.promoted_at)


def _links_for_reader(link, token: str, texts: dict) -> dict:
    """`#123` links lead a mentor only to results this link shares; others become plain text."""
    refs = set().union(*(sanitize.experiment_refs(html) for html in texts.values()))
    openable = shares.openable_numbers(link, refs)

    def href_for(number: int) -> str | None:
        return url_for("share.result", token=token, number=number) if number in openable else None
    return {key: sanitize.relink_experiment_refs(html, href_for) for key, html in texts.items()}


@bp.get("/<token>")
@access.share
def view(token: str):
    """The results behind a link: one result, or the list of promoted results."""
    link, refusal = _open(token)
    if refusal is not None:
        return refusal
    if link.scope == "weekly_review":
        return _weekly_review_view(link)
    found = shares.shared_results(link)
    if link.scope == "project":
        return _project_view(link, token, found)
    if link.scope == "experiment":
        if not found:
            return _nothing_shared_yet()
        return render_template("share/result.html", **_result_context(link, token, found[0], listed=False))
    items = [{"experiment": r.experiment, "title": title_without_confidence(r.promotion.title),
              "confidence": confidence_of(r.promotion.title), "excerpt": results.excerpt(r.promotion.body)}
             for r in found]
    return render_template("share/index.html", token=token, link=link, items=items)


def _project_view(link, token: str, found):
    """A project link (SPEC §11.4): the published narrative, the project's results promoted to
    `shared`, and its stated beliefs' public text; never a draft, a proposal or evidence notes."""
    project = projects.by_id(link.project_id)
    if project is None:
        return _not_found()
    published = narratives.shown(narratives.published(project.id))
    narrative_html = _links_for_reader(link, token, {"narrative": published.html})["narrative"] if published else ""
    return render_template("share/project.html", token=token, link=link, project=project,
                           narrative_html=narrative_html, items=projects.shared_items(found),
                           beliefs=projects.public_beliefs(project.id))


def _weekly_review_view(link):
    """A weekly review link (SPEC §12.3): the published version as the mentor update — the
    research questions frozen at publishing (Established citing #N, Open, Next step) and the
    review's text without its costs. A draft saved after publishing waits for the next publish;
    `#N` stays plain text (the link opens no experiment)."""
    shown = weekly_review.mentor_update(link.weekly_review_id) if link.weekly_review_id else None
    if shown is None:
        return render_template("share/message.html", title="Nothing published yet",
                               message="The weekly review behind this link has not been published yet; "
                                       "try again later.")
    review, version, body_html = shown
    body_html = sanitize.relink_experiment_refs(body_html, lambda number: None)
    return render_template("share/weekly_review.html", review=review, version=version, body_html=body_html,
                           groups=version.questions or [], week_start=weekly_review.week_start(review))


@bp.get("/<token>/<int:number>")
@access.share
def result(token: str, number: int):
    """One promoted result from an "all promoted results" link."""
    link, refusal = _open(token)
    if refusal is not None:
        return refusal
    shared = shares.shared_result(link, number)
    if shared is None:
        return _not_found()
    return render_template("share/result.html",
                           **_result_context(link, token, shared, listed=link.scope != "experiment"))


@bp.get("/<token>/metrics")
@access.share
def view_metrics(token: str):
    """Chart data for the one experiment a link shares (the page's metric charts)."""
    link, refusal = _open(token, count_view=False)
    if refusal is not None:
        return refusal
    found = shares.shared_results(link) if link.scope == "experiment" else []
    return _charts(found[0] if found else None)


@bp.get("/<token>/<int:number>/metrics")
@access.share
def result_metrics(token: str, number: int):
    """Chart data for one result of an "all promoted results" link."""
    link, refusal = _open(token, count_view=False)
    if refusal is not None:
        return refusal
    return _charts(shares.shared_result(link, number))
