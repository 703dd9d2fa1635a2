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
from services import discussion, metrics, results, sanitize, shares
from services.errors import RateLimited
from services.result_lint import confidence_of, title_without_confidence

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


def _result_context(link, token: str, experiment, *, listed: bool) -> dict:
    comments = discussion.thread("experiment", experiment.id).comments if link.include_comments else []
    figures = results.figures(experiment)
    texts = {"result": experiment.body or "", **{c.id: c.body_html for c in comments},
             **{("figure", f.id): f.html for f in figures if f.html}}
    readable = _links_for_reader(link, token, texts)
    for figure in figures:
        if figure.html:
            figure.html = readable.pop(("figure", figure.id))
    data_url = (url_for("share.result_metrics", token=token, number=experiment.number) if listed
                else url_for("share.view_metrics", token=token))
    return {"link": link, "experiment": experiment, "token": token, "listed": listed,
            **metrics.page_context(experiment), "metrics_data_url": data_url, "metrics_refresh": None,
            "result_title": title_without_confidence(experiment.title),
            "confidence": confidence_of(experiment.title), "figures": figures,
            "result_body": readable.pop("result"), "comments": comments, "comment_bodies": readable}


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
    found = shares.shared_results(link)
    if link.scope == "experiment":
        if not found:
            return _not_found()
        return render_template("share/result.html", **_result_context(link, token, found[0], listed=False))
    items = [{"experiment": e, "title": title_without_confidence(e.title), "confidence": confidence_of(e.title),
              "excerpt": results.excerpt(e)} for e in found]
    return render_template("share/index.html", token=token, link=link, items=items)


@bp.get("/<token>/<int:number>")
@access.share
def result(token: str, number: int):
    """One promoted result from an "all promoted results" link."""
    link, refusal = _open(token)
    if refusal is not None:
        return refusal
    experiment = shares.shared_result(link, number)
    if experiment is None:
        return _not_found()
    return render_template("share/result.html",
                           **_result_context(link, token, experiment, listed=link.scope != "experiment"))


@bp.get("/<token>/metrics")
@access.share
def view_metrics(token: str):
    """Chart data for the one experiment a link shares (the page's metric charts)."""
    link, refusal = _open(token, count_view=False)
    if refusal is not None:
        return refusal
    found = shares.shared_results(link) if link.scope == "experiment" else []
    if not found:
        return _not_found()
    return chart_json(found[0], request.args.get("name"))


@bp.get("/<token>/<int:number>/metrics")
@access.share
def result_metrics(token: str, number: int):
    """Chart data for one result of an "all promoted results" link."""
    link, refusal = _open(token, count_view=False)
    if refusal is not None:
        return refusal
    experiment = shares.shared_result(link, number)
    if experiment is None:
        return _not_found()
    return chart_json(experiment, request.args.get("name"))
