"""Every route declares an access rule and no owner route answers without a session
(SPEC §10: "a test walks the URL map")."""
from __future__ import annotations

import uuid

import pytest
from werkzeug.routing import IntegerConverter, UUIDConverter

import config as sagan_config
from app import create_app

SAMPLE_UUID = uuid.UUID("00000000-0000-4000-8000-000000000001")
UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}


def _sample_url(rule) -> str:
    """The rule's path with a plausible value for every URL variable."""
    values = {}
    for name, converter in rule._converters.items():
        if isinstance(converter, IntegerConverter):
            values[name] = 1
        elif isinstance(converter, UUIDConverter):
            values[name] = SAMPLE_UUID
        else:
            values[name] = "1"
    _domain, path = rule.build(values)
    return path


def _routes(app, kinds: set[str]):
    """(method, url, rule) for every route whose access rule kind is in `kinds`."""
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        kind = app.view_functions[rule.endpoint].access_rule[0]
        if kind not in kinds:
            continue
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            yield method, _sample_url(rule), rule


def test_every_endpoint_declares_an_access_rule(app):
    """Does every view in the URL map carry `access_rule` (deny by default otherwise)?"""
    missing = [rule.endpoint for rule in app.url_map.iter_rules()
               if rule.endpoint != "static"
               and not hasattr(app.view_functions[rule.endpoint], "access_rule")]
    assert missing == []
    for rule in app.url_map.iter_rules():
        if rule.endpoint != "static":
            kind, _scope = app.view_functions[rule.endpoint].access_rule
            assert isinstance(kind, str) and kind


def test_the_known_pages_have_the_expected_rules(app):
    """Are login and health public, the pages owner-only and the API token-scoped?"""
    rule_of = {name: getattr(view, "access_rule", None) for name, view in app.view_functions.items()}
    assert rule_of["auth.login"] == ("public", None)
    assert rule_of["health.healthz"] == ("public", None)
    for endpoint in ("board.index", "board.columns", "board.move", "board.your_turn", "auth.logout",
                     "experiments.index", "experiments.new", "experiments.detail",
                     "experiments.timeline", "experiments.change_status", "experiments.edit",
                     "tokens.index", "tokens.create", "tokens.revoke"):
        assert rule_of[endpoint] == ("owner", None), endpoint
    assert rule_of["api.statuses"] == ("api", "read")
    assert rule_of["api.list_experiments"] == ("api", "read")
    assert rule_of["share.view"] == ("share", None) and rule_of["share.result"] == ("share", None)
    assert rule_of["api.promote_experiment"] == ("api", "write+promote")
    assert rule_of["api.patch_clean_result"] == ("api", "write")
    for endpoint in ("results.save", "results.preview", "results.draft", "results.promote",
                     "results.attach_figure", "discussion.post_experiment", "discussion.post_run",
                     "discussion.edit", "discussion.delete", "settings.create_share_link",
                     "settings.revoke_share_link"):
        assert rule_of[endpoint] == ("owner", None), endpoint
    # Share links are the only rule besides public that needs no credential, and only under /s/.
    for rule in app.url_map.iter_rules():
        if rule.endpoint != "static" and rule_of[rule.endpoint][0] == "share":
            assert rule.rule.startswith("/s/") and rule.methods <= {"GET", "HEAD", "OPTIONS"}, rule.rule


def test_owner_routes_redirect_to_login_without_a_session(app, client):
    """Does every owner route (any method) send a browser without a session to /login?"""
    routes = list(_routes(app, {"owner"}))
    assert len(routes) >= 14
    for method, url, rule in routes:
        response = client.open(url, method=method)
        assert response.status_code == 302, (method, url, response.status_code)
        assert response.headers["Location"].startswith("/login"), (method, url)


def test_owner_routes_answer_htmx_with_401_and_hx_redirect(app, client):
    """Does an htmx request without a session get 401 and HX-Redirect to the login page?"""
    for method, url, rule in _routes(app, {"owner"}):
        response = client.open(url, method=method, headers={"HX-Request": "true",
                                                            "HX-Current-URL": "http://localhost/"})
        assert response.status_code == 401, (method, url, response.status_code)
        assert response.headers["HX-Redirect"].startswith("/login"), (method, url)
        assert "<form" not in response.text  # no login form swapped into a card


def test_api_routes_answer_401_json_without_credentials(app, client):
    """Does every /api/ route without a session or token answer 401 JSON?"""
    routes = [(m, u, r) for m, u, r in _routes(app, {"owner", "api", "owner_api"})
              if u.startswith("/api/")]
    assert routes
    for method, url, rule in routes:
        response = client.open(url, method=method)
        assert response.status_code == 401, (method, url, response.status_code)
        assert response.is_json, (method, url)
        assert response.get_json()["error"] in ("unauthorized", "invalid_token")


def test_a_token_does_not_open_owner_pages(app, api_client):
    """Does a bearer token with every scope still not reach any owner page?"""
    scripted = api_client("read,write,dispatch,promote")
    for method, url, rule in _routes(app, {"owner"}):
        response = scripted.open(url, method=method)
        assert not 200 <= response.status_code < 300, (method, url, response.status_code)
        assert response.status_code in (302, 401), (method, url)


def test_owner_api_routes_refuse_tokens(app, api_client):
    """Does every owner-session-only API route refuse a bearer token with 403?"""
    scripted = api_client("read,write,dispatch,promote")
    for method, url, rule in _routes(app, {"owner_api"}):
        response = scripted.open(url, method=method, json={})
        assert response.status_code == 403, (method, url, response.status_code)


def test_public_routes_answer_without_a_session(client):
    """Do the login page and the health check answer without a session?"""
    assert client.get("/login").status_code == 200
    assert client.get("/healthz").status_code in (200, 503)
    assert client.get("/static/css/sagan.css").status_code == 200


def test_a_route_without_a_rule_is_denied():
    """Does a view that forgot its access rule answer 403 (deny by default)?"""
    app = create_app(sagan_config.TestConfig)
    app.add_url_rule("/forgotten", "forgotten", lambda: "secret data")
    response = app.test_client().get("/forgotten")
    assert response.status_code == 403
    assert "secret data" not in response.text
    assert response.get_json()["error"] == "no_access_rule"


@pytest.mark.parametrize("path", ["/", "/experiments", "/your-turn", "/api-tokens"])
def test_owner_pages_work_with_a_session(client, owner, path):
    """With the owner's session, do the main pages answer 200?"""
    assert client.get(path).status_code == 200


def test_share_routes_answer_404_for_a_bad_token_and_stay_stateless(app, client, owner):
    """Does every share route answer an unknown token with 404, set no cookie, and send noindex
    and no-referrer — even to a browser that holds the owner's session?"""
    routes = list(_routes(app, {"share"}))
    assert len(routes) >= 2
    for method, url, rule in routes:
        response = client.open(url, method=method)
        assert response.status_code == 404, (method, url, response.status_code)
        assert "Set-Cookie" not in response.headers, url
        assert response.headers["X-Robots-Tag"].startswith("noindex")
        assert response.headers["Referrer-Policy"] == "no-referrer"
        assert "Log out" not in response.text  # the owner's session is not even read there
