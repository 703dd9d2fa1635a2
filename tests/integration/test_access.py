"""Every route declares an access rule and no owner route answers without a session
(SPEC §10: "a test walks the URL map")."""
from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from werkzeug.routing import IntegerConverter, UUIDConverter

import config as sagan_config
from app import create_app
from services.core import clock
from tests.conftest import csrf_from

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
    # Signing out is every account's; the members' own pages name their action (permissions.py).
    assert rule_of["auth.logout"] == rule_of["members.home"] == ("allow", "signed_in")
    assert rule_of["members.join"] == ("public", None)
    for endpoint in ("members.index", "members.invite", "members.change", "members.remove", "members.withdraw"):
        assert rule_of[endpoint] == ("owner", None), endpoint
    for endpoint in ("today.index", "today.live", "today.act", "board.index", "board.columns", "board.move", "board.your_turn",
                     "experiments.index", "experiments.new", "experiments.detail",
                     "experiments.timeline", "experiments.live", "experiments.change_status", "experiments.edit",
                     "tokens.index", "tokens.create", "tokens.revoke"):
        assert rule_of[endpoint] == ("owner", None), endpoint
    assert rule_of["api.statuses"] == ("api", "read")
    assert rule_of["api.list_experiments"] == ("api", "read")
    assert rule_of["share.view"] == ("share", None) and rule_of["share.result"] == ("share", None)
    assert rule_of["api.promote_experiment"] == ("api", "write+promote")
    for endpoint in ("progress.post_progress", "progress.post_artifact", "progress.post_metrics",
                     "progress.metrics_helper"):
        assert rule_of[endpoint] == ("pod", None), endpoint
    assert rule_of["api.patch_clean_result"] == ("api", "write")
    for endpoint in ("projects.index", "projects.new", "projects.detail", "projects.edit", "projects.change_status",
                     "projects.narrative", "projects.save_narrative", "projects.narrative_version",
                     "projects.publish_narrative", "projects.create_share_link"):
        assert rule_of[endpoint] == ("owner", None), endpoint
    assert rule_of["api.list_projects"] == rule_of["api.get_project"] == ("api", "read")
    assert rule_of["api.create_project"] == rule_of["api.patch_project"] == ("api", "write")
    for endpoint in ("results.save", "results.preview", "results.draft", "results.promote",
                     "results.attach_figure", "discussion.post_experiment", "discussion.post_run",
                     "discussion.edit", "discussion.delete", "discussion.retry", "settings.create_share_link",
                     "settings.revoke_share_link", "settings.pod_secret_allowlist", "auth.logout_everywhere",
                     "settings.clear_research_repository", "settings.web_research", "pods.logs",
                     "settings.zotero_library", "library.index", "library.item", "library.add_by_identifier",
                     "library.create", "library.edit", "library.read_state", "library.import_bibtex",
                     "library.export_bibtex", "library.import_zotero", "library.create_feed", "library.poll_feed",
                     "library.delete_feed", "library.assess", "discussion.post_literature",
                     "discussion.literature_thread"):
        assert rule_of[endpoint] == ("owner", None), endpoint
    for endpoint in ("beliefs.index", "beliefs.new", "beliefs.detail", "beliefs.edit", "beliefs.accept",
                     "beliefs.reject", "links.panel", "links.create", "links.delete"):
        assert rule_of[endpoint] == ("owner", None), endpoint
    for endpoint in ("api.list_beliefs", "api.get_belief", "api.list_proposals", "api.list_links"):
        assert rule_of[endpoint] == ("api", "read"), endpoint
    for endpoint in ("api.create_belief", "api.patch_belief", "api.create_link", "api.delete_link"):
        assert rule_of[endpoint] == ("api", "write"), endpoint
    # Claude never changes a belief without the owner: no token accepts or rejects an update.
    for endpoint in ("api.accept_proposal", "api.reject_proposal"):
        assert rule_of[endpoint] == ("owner_api", None), endpoint
    for endpoint in ("todos.index", "todos.create", "todos.change_status", "todos.detail", "todos.edit",
                     "todos.make_experiment"):
        assert rule_of[endpoint] == ("owner", None), endpoint
    for endpoint in ("api.list_todos", "api.get_todo"):
        assert rule_of[endpoint] == ("api", "read"), endpoint
    # Making a todo an experiment creates one: the scope that creating an experiment takes.
    for endpoint in ("api.create_todo", "api.patch_todo", "api.make_todo_experiment"):
        assert rule_of[endpoint] == rule_of["api.create_experiment"] == ("api", "write"), endpoint
    for endpoint in ("api.list_literature", "api.get_literature"):
        assert rule_of[endpoint] == ("api", "read"), endpoint
    for endpoint in ("api.create_literature", "api.patch_literature"):
        assert rule_of[endpoint] == ("api", "write"), endpoint
    for endpoint in ("daily_log.index", "daily_log.day", "daily_log.write"):
        assert rule_of[endpoint] == ("owner", None), endpoint
    # Ideation's pages are the owner's.
    for endpoint in ("ideation.index", "ideation.start", "ideation.detail", "ideation.save_answers",
                     "ideation.cards", "ideation.propose", "ideation.add_card", "ideation.promote",
                     "ideation.discard", "ideation.restore"):
        assert rule_of[endpoint] == ("owner", None), endpoint
    # Its API: a token reads with `read`; starting, answering, adding and promoting (which can
    # create an experiment) take `write`, the scope creating an experiment takes.
    for endpoint in ("api.list_ideation_sessions", "api.get_ideation_session"):
        assert rule_of[endpoint] == ("api", "read"), endpoint
    for endpoint in ("api.start_ideation_session", "api.save_ideation_answers", "api.add_idea_card",
                     "api.promote_idea_card"):
        assert rule_of[endpoint] == rule_of["api.create_experiment"] == ("api", "write"), endpoint
    assert rule_of["api.list_daily_log"] == ("api", "read")
    assert rule_of["api.write_daily_log"] == ("api", "write")
    for endpoint in ("settings.email_server", "settings.email_preferences", "settings.email_test",
                     "settings.dismiss_failed_email", "settings.retry_failed_email"):
        assert rule_of[endpoint] == ("owner", None), endpoint
    # An emailed unsubscribe link is its own credential (signed), and only under /email/unsubscribe/.
    assert rule_of["unsubscribe.page"] == ("signed", None)
    for rule in app.url_map.iter_rules():
        if rule.endpoint != "static" and rule_of[rule.endpoint][0] == "signed":
            assert rule.rule.startswith("/email/unsubscribe/"), rule.rule
    # Share links are the only rule besides public that needs no credential, and only under /s/.
    for rule in app.url_map.iter_rules():
        if rule.endpoint != "static" and rule_of[rule.endpoint][0] == "share":
            assert rule.rule.startswith("/s/") and rule.methods <= {"GET", "HEAD", "OPTIONS"}, rule.rule


def test_owner_routes_redirect_to_login_without_a_session(app, client):
    """Does every owner route (any method) send a browser without a session to /login?"""
    routes = list(_routes(app, {"owner", "allow"}))
    assert len(routes) >= 14
    for method, url, rule in routes:
        response = client.open(url, method=method)
        assert response.status_code == 302, (method, url, response.status_code)
        assert response.headers["Location"].startswith("/login"), (method, url)


def test_owner_routes_answer_htmx_with_401_and_hx_redirect(app, client):
    """Does an htmx request without a session get 401 and HX-Redirect to the login page?"""
    for method, url, rule in _routes(app, {"owner", "allow"}):
        response = client.open(url, method=method, headers={"HX-Request": "true",
                                                            "HX-Current-URL": "http://localhost/"})
        assert response.status_code == 401, (method, url, response.status_code)
        assert response.headers["HX-Redirect"].startswith("/login"), (method, url)
        assert "<form" not in response.text  # no login form swapped into a card


def test_api_routes_answer_401_json_without_credentials(app, client):
    """Does every /api/ route without a session or token answer 401 JSON?"""
    routes = [(m, u, r) for m, u, r in _routes(app, {"owner", "api", "owner_api", "member_api"})
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
    for method, url, rule in _routes(app, {"owner", "allow"}):
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


@pytest.mark.parametrize("path", ["/", "/experiments", "/your-turn", "/api-tokens", "/beliefs", "/beliefs/new",
                                  "/todos", "/ideas"])
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


# --- each credential reaches exactly its rule (SPEC §10) ---------------------------------------

def _all_routes(app):
    """(method, url, kind, scope) for every route but static."""
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        kind, scope = app.view_functions[rule.endpoint].access_rule
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            yield method, _sample_url(rule), kind, scope


def _share_token(app) -> str:
    """A live link to all promoted results."""
    from models import db
    from services.results import shares
    with app.app_context():
        _link, token = shares.create_link(scope="all_promoted")
        db.session.commit()
    return token


@pytest.mark.parametrize("scope", ["read", "write", "dispatch", "promote"])
def test_a_token_with_one_scope_reaches_only_routes_needing_that_scope(app, api_client, owner, scope):
    """Walk every route with a one-scope token: API routes needing another scope answer 403
    missing_scope, owner-only ones 403 or a login redirect, and the rest pass the access check."""
    from app import csrf  # noqa: F401 - the app module is imported for its extensions
    from blueprints import access
    scripted = api_client(scope)
    checked = 0
    for method, url, kind, rule_scope in _all_routes(app):
        response = scripted.open(url, method=method, json={})
        body = response.get_json(silent=True) or {}
        if kind == "api":
            if set(rule_scope.split("+")) <= {scope}:
                assert response.status_code not in (401, 403), (method, url, response.status_code)
            else:
                assert response.status_code == 403 and body.get("error") == "missing_scope", (method, url)
            checked += 1
        elif kind == "owner_api":
            assert response.status_code == 403 and body.get("error") == "owner_session_required", (method, url)
        elif kind == "member_api":  # the owner's token: its scope decides, as on the owner's API
            if access.member_api_scope(rule_scope) == scope:
                assert response.status_code not in (401, 403), (method, url, response.status_code, body)
            else:
                assert response.status_code == 403 and body.get("error") == "missing_scope", (method, url)
        elif kind in ("owner", "allow"):
            assert response.status_code in (302, 401), (method, url, response.status_code)
        elif kind == "pod":
            assert response.status_code == 401 and body.get("error") == "invalid_pod_token", (method, url)
    assert checked > 20


def test_a_pod_token_reaches_only_its_progress_and_artifact_posts(app, client, make_live_pod, monkeypatch):
    """A pod's own token, sent to every route that is not a pod route, opens nothing."""
    monkeypatch.setitem(app.config, "BEARER_MAX_FAILURES", 10_000)  # the sweep itself is many bad tokens
    secret = make_live_pod("Pod token sweep", tag="sweep").secret
    headers = {"Authorization": f"Bearer {secret}"}
    routes = [(m, u, k) for m, u, k, _s in _all_routes(app) if k not in ("pod", "public", "share", "signed")]
    assert len(routes) > 40
    for method, url, kind in routes:
        response = client.open(url, method=method, headers=headers, json={})
        assert not 200 <= response.status_code < 300, (method, url, response.status_code)
        assert response.status_code in (302, 401, 403), (method, url, response.status_code)
    ok = client.post("/api/progress", headers=headers, json={"progressPct": 1, "message": "still mine", "seq": 1})
    assert ok.status_code == 200  # …while its own post still works


def test_a_share_link_reaches_nothing_but_its_own_page(app, client, make_experiment, monkeypatch):
    """A live share token opens its /s/ page and nothing else: not as a bearer token, not in
    another route's path, and visiting it leaves no session behind."""
    monkeypatch.setitem(app.config, "BEARER_MAX_FAILURES", 10_000)  # the sweep itself is many bad tokens
    token = _share_token(app)
    assert client.get(f"/s/{token}").status_code == 200
    for method, url, kind, _scope in _all_routes(app):
        if kind in ("public", "share", "signed"):
            continue
        as_bearer = client.open(url, method=method, headers={"Authorization": f"Bearer {token}"}, json={})
        assert not 200 <= as_bearer.status_code < 300, (method, url, as_bearer.status_code)
        assert as_bearer.status_code in (302, 401, 403), (method, url, as_bearer.status_code)
    for url in ("/", "/experiments", "/api-tokens", "/settings", "/runs"):
        assert client.get(url).status_code == 302  # no session was made by the share page
    for rule in app.url_map.iter_rules():
        if rule.endpoint != "static" and "<" in rule.rule and rule.rule.startswith("/api/"):
            kind = app.view_functions[rule.endpoint].access_rule[0]
            if kind not in ("public", "share", "signed"):
                url = re.sub(r"<[^>]+>", token, rule.rule)
                for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
                    answer = client.open(url, method=method, json={})
                    assert answer.status_code in (401, 403, 404, 405), (method, url, answer.status_code)


# --- CSRF on every state change made with a session -------------------------------------------

def _row_counts(app) -> dict:
    import sqlalchemy as sa

    from models import db
    with app.app_context():
        return {table.name: db.session.scalar(sa.select(sa.func.count()).select_from(table))
                for table in db.metadata.sorted_tables}


def test_every_state_changing_route_refuses_a_session_request_without_csrf(app, client, owner, make_experiment):
    """POST/PUT/PATCH/DELETE on every owner and session-API route, with the owner's session
    and no CSRF token, as a form and as htmx: 400 csrf_failed, and no row anywhere changed."""
    number = make_experiment("CSRF target", status="proposed")
    before = _row_counts(app)
    routes = [(m, u) for m, u, k, _s in _all_routes(app)
              if m in UNSAFE and k in ("owner", "api", "owner_api", "allow", "member_api")]
    assert len(routes) > 30
    for method, url in routes:
        url = url.replace("/1", f"/{number}", 1) if "/1" in url else url
        for headers in ({}, {"HX-Request": "true"}):
            response = client.open(url, method=method, data={"title": "x", "to": "planning"}, headers=headers)
            assert response.status_code == 400, (method, url, response.status_code)
            assert response.headers.get("X-Sagan-Error") == "csrf_failed", (method, url)
        response = client.open(url, method=method, json={"title": "x"}, headers={"X-CSRFToken": "forged"})
        assert response.status_code == 400, (method, url, response.status_code)
    assert _row_counts(app) == before


# --- repeated bad bearer tokens are rate limited --------------------------------------------------

def test_repeated_bad_bearer_tokens_from_one_address_get_429(app, api_client):
    """After SAGAN_BEARER_MAX_FAILURES unknown tokens in a window, that address gets 429 with a
    clear message — API and pod routes alike, even with a valid token — while another address
    is unaffected; the window passing lifts it."""
    import redis as redis_lib
    good = api_client("read")
    limit = app.config["BEARER_MAX_FAILURES"]
    bad = app.test_client()
    for i in range(limit):
        answer = bad.get("/api/statuses", headers={"Authorization": f"Bearer sk_wrong{i}"})
        assert answer.status_code == 401
    for path, method in (("/api/statuses", "GET"), ("/api/progress", "POST")):
        refused = bad.open(path, method=method, headers={"Authorization": "Bearer sk_wrong-again"}, json={})
        assert refused.status_code == 429, path
        assert refused.get_json()["error"] == "rate_limited" and "wait a minute" in refused.get_json()["message"]
        assert 0 < int(refused.headers["Retry-After"]) <= app.config["BEARER_FAILURE_WINDOW"]
    # Guessing gains nothing once limited: even a valid token is refused from that address.
    assert bad.get("/api/statuses", headers={"Authorization": f"Bearer {good.secret}"}).status_code == 429
    other = good.get("/api/statuses", environ_base={"REMOTE_ADDR": "10.0.0.9",
                                                    "HTTP_AUTHORIZATION": f"Bearer {good.secret}"})
    assert other.status_code == 200
    clock.advance(timedelta(seconds=app.config["BEARER_FAILURE_WINDOW"] + 1))
    redis_lib.Redis.from_url(app.config["REDIS_URL"]).delete("sagan:bearer-failures:127.0.0.1")  # expired too
    assert bad.get("/api/statuses", headers={"Authorization": f"Bearer {good.secret}"}).status_code == 200
    assert bad.get("/api/statuses", headers={"Authorization": "Bearer sk_wrong"}).status_code == 401


def test_the_bad_token_count_is_shared_by_every_process(app, api_client):
    """Failures counted by other web processes (the shared Redis counter) limit this one
    from its next failure on."""
    import redis as redis_lib
    redis_lib.Redis.from_url(app.config["REDIS_URL"]).set("sagan:bearer-failures:127.0.0.1",
                                                          app.config["BEARER_MAX_FAILURES"] + 5, ex=60)
    bad = app.test_client()
    assert bad.get("/api/statuses", headers={"Authorization": "Bearer sk_guess-1"}).status_code == 401
    assert bad.get("/api/statuses", headers={"Authorization": "Bearer sk_guess-2"}).status_code == 429


# --- every route, walked with every role (SPEC §13) ----------------------------------------------

def _endpoint_routes(app):
    """(method, url, kind, scope, endpoint) for every route but static."""
    for rule in app.url_map.iter_rules():
        if rule.endpoint == "static":
            continue
        kind, scope = app.view_functions[rule.endpoint].access_rule
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            yield method, _sample_url(rule), kind, scope, rule.endpoint


def test_every_route_answers_each_member_role_by_the_role_table(app, client, member_client, make_experiment,
                                                                monkeypatch):
    """A collaborator of project A, a collaborator of project B and a mentor walk every route
    with their sessions and a valid CSRF token: each owner, API and owner-API route answers 403
    not_for_your_role (as a page, JSON or to htmx alike), an `allow` route answers as the role
    table says, and no row anywhere changed. Anonymous and the owner are walked above."""
    from services.core import permissions
    monkeypatch.setitem(app.config, "LOGIN_MAX_FAILURES", 10_000)  # the sweep posts /login empty…
    monkeypatch.setitem(app.config, "BEARER_MAX_FAILURES", 10_000)  # …and pod routes without a token
    number = make_experiment("Role sweep target", status="proposed")
    walkers = {"collaborator of A": member_client("a@example.org", "collaborator", projects=(0,)),
               "collaborator of B": member_client("b@example.org", "collaborator", projects=(1,)),
               "mentor": member_client("m@example.org", "mentor", projects=(0, 1))}
    before = _row_counts(app)
    checked = 0
    for who, walker in walkers.items():
        role = who.split()[0]
        csrf = csrf_from(walker.get("/welcome").text)
        for method, url, kind, scope, endpoint in _endpoint_routes(app):
            if endpoint == "auth.logout":
                continue  # it ends the walk; the members' tests sign out on purpose
            url = url.replace("/1", f"/{number}", 1) if "/1" in url else url
            for headers in ({"X-CSRFToken": csrf}, {"X-CSRFToken": csrf, "HX-Request": "true"}):
                answer = walker.open(url, method=method, data={"title": "x", "to": "planning"}, headers=headers)
                where = (who, method, url, answer.status_code)
                if kind in ("owner", "api", "owner_api"):
                    assert answer.status_code == 403, where
                    assert answer.headers.get("X-Sagan-Error") == "not_for_your_role", where
                    checked += 1
                elif kind == "allow":
                    if permissions.role_may(role, scope):
                        assert answer.status_code not in (401, 403), where
                    else:
                        assert answer.status_code == 403, where
                elif kind == "member_api":  # the walk's experiment is in no project: 404 when opened
                    if permissions.role_may(role, scope):
                        assert answer.status_code not in (401, 403) and answer.status_code < 500, where
                    else:
                        assert answer.status_code == 403, where
                        assert answer.headers.get("X-Sagan-Error") == "not_for_your_role", where
                elif kind == "pod":
                    assert answer.status_code == 401, where
                elif kind == "share":
                    assert answer.status_code == 404, where
    assert checked > 300
    after = _row_counts(app)
    assert {t: n for t, n in after.items() if t != "users"} == {t: n for t, n in before.items() if t != "users"}


@pytest.mark.parametrize("role,scopes", [("collaborator", "read,write"), ("collaborator", "read"),
                                         ("mentor", "read")])
def test_a_members_token_reaches_only_the_member_routes_its_role_and_scope_open(app, member_client, monkeypatch,
                                                                                role, scopes):
    """A member's token opens only the /api/m/ routes whose action their role may do and whose
    scope it holds; every other API route answers 403 not_for_your_role (or missing_scope),
    session routes 302/401/403, pod routes 401."""
    from blueprints import access
    from services.core import permissions
    import sqlalchemy as sa

    from models import User, db
    from services.core import auth as auth_service
    monkeypatch.setitem(app.config, "BEARER_MAX_FAILURES", 10_000)
    holder = member_client("t@example.org", role)
    with app.app_context():
        _token, secret = auth_service.create_token("member script", scopes,
                                                   db.session.scalar(sa.select(User).where(User.id == holder.member_id)))
        db.session.commit()
    scripted = app.test_client()
    for method, url, kind, _scope, _endpoint in _endpoint_routes(app):
        if kind in ("public", "share"):
            continue
        answer = scripted.open(url, method=method, headers={"Authorization": f"Bearer {secret}"}, json={})
        if kind == "member_api":
            if permissions.role_may(role, _scope) and access.member_api_scope(_scope) in scopes.split(","):
                assert answer.status_code not in (401, 403) and answer.status_code < 500, (method, url)
            else:
                assert answer.status_code == 403, (method, url, answer.status_code)
                assert answer.get_json()["error"] in ("not_for_your_role", "missing_scope"), (method, url)
            continue
        assert not 200 <= answer.status_code < 300, (method, url, answer.status_code)
        if kind == "api":  # a scope the role cannot hold is missing; the rest are not for the role
            assert answer.status_code == 403, (method, url)
            assert answer.get_json()["error"] in ("not_for_your_role", "missing_scope"), (method, url)


def test_no_two_routes_share_a_path_and_method(app):
    """A second rule on a taken path is silently shadowed (or shadows the first): a page
    opened to members on an owner page's path would take the owner's page over."""
    seen, twice = set(), []
    for rule in app.url_map.iter_rules():
        converters = re.sub(r"<(?:[a-z]+:)?[a-z_]+>", "<>", rule.rule)
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            key = (converters, method)
            (twice.append(key) if key in seen else seen.add(key))
    assert twice == []
