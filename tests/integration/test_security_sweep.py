"""Security sweep (SPEC §10): fuzzed API and form inputs, oversized bodies on every
state-changing route, and secrets that never show up in pages, events, logs or /healthz.

The access rules themselves (every route, every credential, CSRF everywhere, the bearer
rate limit) are walked in test_access.py.
"""
from __future__ import annotations

import json
import logging
import re
import uuid
from collections import deque
from urllib.parse import urljoin, urlsplit

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from models import Pod, db
from services.dispatch import tokens
from services.workflow import experiments, runs

FUZZ = settings(max_examples=40, deadline=None, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

# Any JSON value, nested a little: what a confused or hostile client might send.
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-2**70, max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=8)

EXPERIMENT_FIELDS = ["title", "hypothesis", "kind", "priority", "compute_size", "tags", "assignee_kind",
                     "pod_account", "cost_cap_usd", "git_branch", "git_commit", "status", "note",
                     "expected_status", "auto_approve_plan", "pod_spec", "surprise"]
EVENT_FIELDS = ["marker", "note", "event_type", "eventType", "to_status", "toStatus", "from_status",
                "next_status", "metadata", "verdict", "round", "actor_kind", "questions", "markdown"]
PROGRESS_FIELDS = ["progressPct", "message", "milestone", "verdict", "seq", "exitCode", "metrics", "extra"]


def bodies(fields: list[str]):
    """JSON objects mostly made of the endpoint's own field names, with any values; plus
    other JSON documents and raw bytes that are not JSON at all."""
    objects = st.dictionaries(st.sampled_from(fields) | st.text(max_size=12), json_values, max_size=6)
    return st.one_of(objects.map(json.dumps), json_values.map(json.dumps),
                     st.binary(max_size=60).map(lambda b: b.decode("latin-1")))


def _counts(app) -> dict:
    with app.app_context():
        return {t.name: db.session.scalar(sa.select(sa.func.count()).select_from(t))
                for t in db.metadata.sorted_tables}


def _snapshot(app, number: int) -> dict:
    from blueprints.api.experiments import experiment_json
    with app.app_context():
        return experiment_json(experiments.get_experiment(number))


def _check(app, response, before_counts, number=None, before=None) -> None:
    """No 500s; a refusal is a clear JSON 4xx and changed nothing."""
    assert response.status_code < 500, response.get_data(as_text=True)[:500]
    if response.status_code >= 400:
        body = response.get_json(silent=True)
        assert isinstance(body, dict) and body.get("error") and body.get("message"), response.get_data()[:300]
        assert _counts(app) == before_counts
        if number is not None:
            assert _snapshot(app, number) == before


@pytest.mark.slow
def test_fuzzed_experiment_create_and_patch_never_500_and_refusals_change_nothing(app, api_client, make_experiment):
    """POST and PATCH /api/experiments with arbitrary bodies: 201/200 or a clear 4xx, never a
    500; a refused PATCH leaves the experiment exactly as it was."""
    scripted = api_client("read,write")
    number = make_experiment("Fuzz target")

    @FUZZ
    @given(body=bodies(EXPERIMENT_FIELDS))
    def create(body):
        before = _counts(app)
        response = scripted.post("/api/experiments", data=body, content_type="application/json")
        _check(app, response, before)
        # 403: a token may not set an owner-only field such as cost_cap_usd.
        assert response.status_code in (201, 400, 403, 409, 422), response.status_code

    @FUZZ
    @given(body=bodies(EXPERIMENT_FIELDS))
    def patch(body):
        before, snapshot = _counts(app), _snapshot(app, number)
        response = scripted.patch(f"/api/experiments/{number}", data=body, content_type="application/json")
        _check(app, response, before, number, snapshot)

    create()
    patch()


@pytest.mark.slow
def test_fuzzed_workflow_events_plans_and_questions_never_500(app, api_client, make_experiment):
    """Markers, status changes, plans and questions with arbitrary bodies: never a 500; a
    refusal is a clear JSON error and changes nothing."""
    scripted = api_client("read,write")
    number = make_experiment("Fuzz workflow", status="planning")

    @FUZZ
    @given(path=st.sampled_from(["workflow-events", "plans", "questions"]), body=bodies(EVENT_FIELDS))
    def post(path, body):
        before, snapshot = _counts(app), _snapshot(app, number)
        response = scripted.post(f"/api/experiments/{number}/{path}", data=body, content_type="application/json")
        _check(app, response, before, number, snapshot)

    post()


@pytest.mark.slow
def test_fuzzed_progress_posts_never_500(app, client, make_live_pod):
    """A pod's progress endpoint with arbitrary bodies: ok, or a clear 400 that stored nothing."""
    secret = make_live_pod("Fuzz progress", tag="fz").secret

    @FUZZ
    @given(body=bodies(PROGRESS_FIELDS))
    def post(body):
        before = _counts(app)
        response = client.post("/api/progress", data=body, content_type="application/json",
                               headers={"Authorization": f"Bearer {secret}"})
        _check(app, response, before)
        assert response.status_code in (200, 400), response.status_code

    post()


@pytest.mark.slow
def test_fuzzed_forms_never_500_and_refusals_change_nothing(app, client, owner, make_experiment):
    """The main forms (new experiment, edit, status change, board move, comment) with
    arbitrary text: a page (200/303) or a clear 4xx, never a 500; a re-rendered form with an
    error changed no row count."""
    number = make_experiment("Fuzz forms", status="proposed")
    csrf = owner.csrf()
    forms = {
        "/experiments/new": ["title", "hypothesis", "kind", "priority", "tags", "compute_size", "cost_cap_usd"],
        f"/experiments/{number}/edit": ["title", "hypothesis", "kind", "priority", "tags", "cost_cap_usd",
                                       "git_branch"],
        f"/experiments/{number}/status": ["to", "note", "expected"],
        f"/board/move/{number}": ["to", "note", "expected"],
        f"/experiments/{number}/comments": ["body"],
    }
    text = st.text(max_size=60) | st.sampled_from(["", " ", "proposed", "planning", "archived", "-1", "1e309",
                                                  "NaN", "<script>x</script>", "a,b,,c", "\x00"])

    @FUZZ
    @given(url=st.sampled_from(sorted(forms)), data=st.data())
    def post(url, data):
        fields = data.draw(st.dictionaries(st.sampled_from(forms[url]), text, max_size=len(forms[url])))
        response = client.post(url, data={**fields, "csrf_token": csrf})
        assert response.status_code in (200, 303, 400, 404, 409, 413, 422), (url, fields, response.status_code)
        assert "Traceback" not in response.get_data(as_text=True)

    post()


# --- oversized bodies ---------------------------------------------------------------------------

def test_every_state_changing_route_refuses_an_oversized_body_with_413(app, client, owner, api_client):
    """2 MB + 1 byte to every POST/PUT/PATCH/DELETE route (session with CSRF, or the right
    kind of token): 413 before any work, and nothing stored. Artifact uploads and BibTeX imports
    have their own, larger caps, and are refused past them (here and test_library.py)."""
    from tests.integration.test_access import UNSAFE, _sample_url
    over = app.config["MAX_CONTENT_LENGTH"] + 1
    body = b"x" * over
    csrf = owner.csrf()
    scripted = api_client("read,write,dispatch,promote")
    before = _counts(app)
    checked = 0
    for rule in app.url_map.iter_rules():
        if rule.endpoint in ("static", "progress.post_artifact", "library.import_bibtex"):
            continue
        kind = app.view_functions[rule.endpoint].access_rule[0]
        for method in sorted(rule.methods & UNSAFE):
            url = _sample_url(rule)
            if kind in ("owner", "owner_api", "public"):
                response = client.open(url, method=method, data=body, content_type="application/x-www-form-urlencoded",
                                       headers={"X-CSRFToken": csrf})
            else:
                response = scripted.open(url, method=method, data=body, content_type="application/json")
            if kind == "pod":
                assert response.status_code in (401, 413), (method, url)  # no pod token here: refused first
            else:
                assert response.status_code == 413, (method, url, response.status_code)
            checked += 1
    assert checked > 30
    assert _counts(app) == before


def test_an_artifact_over_its_own_cap_is_413(app, client, make_live_pod, monkeypatch):
    """Artifact uploads may exceed 2 MB, up to SAGAN_ARTIFACT_MAX_BYTES, and no further."""
    monkeypatch.setitem(app.config, "ARTIFACT_MAX_BYTES", 3 * 1024 * 1024)
    secret = make_live_pod("Big artifact", tag="big").secret
    headers = {"Authorization": f"Bearer {secret}", "X-Sagan-Artifact-Name": "log.txt"}
    fits = client.post("/api/artifacts", data=b"a" * (2 * 1024 * 1024 + 10), headers=headers, content_type="text/plain")
    assert fits.status_code == 201
    refused = client.post("/api/artifacts", data=b"a" * (3 * 1024 * 1024 + 1), headers=headers,
                          content_type="text/plain")
    assert refused.status_code == 413 and refused.get_json()["error"] == "too_large"


# --- secrets never shown or stored ----------------------------------------------------------------

SECRETS = {
    "SECRET_KEY": "flask-secret-5f1e9c3a7b2d4e60",
    "ANTHROPIC_API_KEY": "sk-ant-api03-SWEEPsecretvalue000000000000000",
    "RUNPOD_API_KEY_TEAM": "rpa_SWEEPTEAMKEY0000000000000000",
    "RUNPOD_API_KEY_PERSONAL": "rpa_SWEEPPERSONALKEY000000000000",
    "SAGAN_OWNER_PASSWORD": "owner-sweep-password-9c2e",
    "HF_TOKEN": "hf_SWEEPhuggingfacetoken00000000000",
    "SAGAN_WEBHOOK_SECRET": "webhook-sweep-secret-77aa",
}


def _crawl(client, start: list[str], limit: int = 400) -> dict[str, str]:
    """GET every same-site page reachable by links from `start` (no form posts); url → body."""
    seen: dict[str, str] = {}
    queue = deque(start)
    while queue and len(seen) < limit:
        url = queue.popleft()
        if url in seen or url.startswith(("/static/", "/logout")):
            continue
        response = client.get(url)
        body = response.get_data(as_text=True)
        seen[url] = body + "\n" + "\n".join(f"{k}: {v}" for k, v in response.headers.items())
        if response.status_code != 200 or "html" not in (response.content_type or ""):
            continue
        for href in re.findall(r'(?:href|hx-get)="([^"#]+)', body):
            href = href.replace("&amp;", "&")
            parts = urlsplit(urljoin("http://localhost" + url, href))
            if parts.netloc == "localhost":
                queue.append(parts.path + (f"?{parts.query}" if parts.query else ""))
    return seen


def test_configured_secrets_never_appear_in_pages_api_events_logs_or_health(
        app, client, owner, api_client, monkeypatch, caplog):
    """Load the demo with secrets in the environment, feed them in through every door (an
    experiment's text, a progress post, an agent's tool result, a comment), then read every
    page, the API, /healthz, the logs and the whole database: no secret value anywhere."""
    from services.core.actors import Actor
    from services.pipeline import demo
    from services.planning import discussion
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
        if name in app.config:
            monkeypatch.setitem(app.config, name, value)
    assert owner.login().status_code == 302  # the session is signed with the new SECRET_KEY
    caplog.set_level(logging.DEBUG)
    leaked_text = " ".join(f"{name}={value}" for name, value in SECRETS.items())
    with app.app_context():
        demo.load_curated()
        experiment = experiments.create_experiment(
            {"title": "Sweep", "hypothesis": f"copied from .env: {leaked_text}"}, Actor("owner", None, "o"))
        run = runs.create_run(kind="apply", agent="experiment-orchestrator", request=f"use {leaked_text}",
                              scope_id=experiment.id, status="running")
        runs.append_event(run.id, "tool_result", f"cat .env\n{leaked_text}",
                          {"tool": "bash", "input": {"cmd": f"echo {SECRETS['ANTHROPIC_API_KEY']}"}})
        discussion.post_comment("experiment", experiment, f"token is {SECRETS['HF_TOKEN']}",
                                Actor("owner", None, "o"))
        secret, digest = tokens.new_token()
        db.session.add(Pod(id=uuid.uuid4(), agent_run_id=run.id, experiment_id=experiment.id, account="local",
                           name=f"sagan-{experiment.number}-sw-0-1", status="running", progress_token_hash=digest))
        db.session.commit()
        number, run_id = experiment.number, run.id
    posted = client.post("/api/progress", headers={"Authorization": f"Bearer {secret}"},
                         json={"progressPct": 5, "message": f"env: {leaked_text}", "seq": 1})
    assert posted.status_code == 200
    scripted = api_client("read")

    pages = _crawl(client, ["/", f"/experiments/{number}", "/experiments", "/runs", f"/runs/{run_id}",
                            "/approvals", "/settings", "/api-tokens", "/your-turn"])
    assert len(pages) > 40
    api_urls = ["/api/experiments?limit=200", f"/api/experiments/{number}", f"/api/experiments/{number}/events",
                "/api/runs", f"/api/runs/{run_id}", f"/api/experiments/{number}/pods", "/api/statuses"]
    for url in api_urls:
        answer = scripted.get(url)
        assert answer.status_code == 200, url
        pages[url] = answer.get_data(as_text=True)
    pages["/healthz"] = client.get("/healthz").get_data(as_text=True)
    pages["/login"] = app.test_client().get("/login").get_data(as_text=True)

    with app.app_context():
        dump = []
        for table in db.metadata.sorted_tables:
            dump += db.session.scalars(sa.text(f"SELECT row_to_json(t)::text FROM {table.name} t")).all()
    logs = caplog.text
    for name, value in SECRETS.items():
        for url, body in pages.items():
            assert value not in body, f"{name} appears on {url}"
        assert not [row for row in dump if value in row], f"{name} is stored in the database"
        assert value not in logs, f"{name} appears in the logs"
    assert any("[REDACTED]" in row for row in dump)  # the doors were tried, and the redactor held
