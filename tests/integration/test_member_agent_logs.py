"""The owner shares one experiment's agent logs with its project's collaborators (SPEC §13:
"unless the owner shares that experiment's logs"): off by default, a confirmed toggle on the
experiment page; while on, collaborators of that project read its runs read-only; off again,
they answer 404 like a run that does not exist. Mentors and other projects never read them."""
from __future__ import annotations

import re

import sqlalchemy as sa

from models import Experiment, db
from tests.conftest import csrf_from
from tests.integration.test_member_pages import _seed
from tests.integration.test_run_pages import add_events, make_run


def _without_csrf(html: str) -> str:
    """The page without its CSRF tokens (signed with the time, so they differ between answers)."""
    html = re.sub(r'"X-CSRFToken": "[^"]+"', "", html)
    return re.sub(r'name="csrf_token" value="[^"]+"', "", html)


def _toggle(client, number: int, shared: str):
    page = client.get(f"/experiments/{number}")
    return client.post(f"/experiments/{number}/agent-logs-share",
                       data={"shared": shared, "csrf_token": csrf_from(page.text)})


def _shared(app, number: int) -> bool:
    with app.app_context():
        return db.session.scalar(sa.select(Experiment.agent_logs_shared).where(Experiment.number == number))


def test_sharing_an_experiments_agent_logs_opens_them_to_its_collaborators_until_stopped(
        app, client, make_experiment, two_projects, member_client):
    numbers = _seed(app, make_experiment, two_projects)
    alpha = numbers["alpha"]
    run_id = make_run(app, alpha, status="completed")
    add_events(app, run_id, ("assistant_text", "Reading the loader to find the ordering flag"))
    other_run = make_run(app, numbers["beta"], status="completed")
    ada = member_client("ada@example.org", "collaborator", projects=(0,))
    bea = member_client("bea@example.org", "collaborator", projects=(1,))
    mentor = member_client("max@example.org", "mentor", projects=(0,))
    run_path = f"/m/alpha/experiments/{alpha}/runs/{run_id}"

    # Off by default: no runs on the member's page, the run answers as one that does not exist.
    assert not _shared(app, alpha)
    missing = ada.get(f"/m/alpha/experiments/{alpha}/runs/00000000-0000-4000-8000-000000000001")
    assert missing.status_code == 404
    closed = ada.get(run_path)
    assert closed.status_code == 404 and _without_csrf(closed.text) == _without_csrf(missing.text)
    assert run_id[:8] not in ada.get(f"/m/alpha/experiments/{alpha}").text
    owner_page = client.get(f"/experiments/{alpha}")
    assert "Share agent logs with collaborators" in owner_page.text and "data-confirm=\"Share #" in owner_page.text

    shared = _toggle(client, alpha, "1")
    assert shared.status_code == 303 and _shared(app, alpha)
    assert "Stop sharing agent logs" in client.get(f"/experiments/{alpha}").text
    page = ada.get(f"/m/alpha/experiments/{alpha}")
    assert run_path in page.text and "12.34" not in page.text  # the run, never its cost
    transcript = ada.get(run_path)
    assert transcript.status_code == 200
    assert "Reading the loader to find the ordering flag" in transcript.text
    content = transcript.text.split('<h1>', 1)[1]
    assert "/cancel" not in content and "<form" not in content and "classification" not in content
    # Another experiment's run under this number, another project's collaborator, a mentor: no.
    assert ada.get(f"/m/alpha/experiments/{alpha}/runs/{other_run}").status_code == 404
    assert ada.get(f"/m/alpha/experiments/{alpha}/runs/not-a-uuid").status_code == 404
    assert bea.get(run_path).status_code == 404
    assert bea.get(f"/m/beta/experiments/{alpha}/runs/{run_id}").status_code == 404
    assert mentor.get(run_path).status_code == 403
    assert ada.get(f"/runs/{run_id}").status_code == 403  # the owner's run page stays the owner's

    stopped = _toggle(client, alpha, "0")
    assert stopped.status_code == 303 and not _shared(app, alpha)
    again = ada.get(run_path)
    assert again.status_code == 404 and _without_csrf(again.text) == _without_csrf(missing.text)
    assert run_path not in ada.get(f"/m/alpha/experiments/{alpha}").text


def test_bad_toggles_change_nothing(app, client, make_experiment, two_projects, member_client):
    numbers = _seed(app, make_experiment, two_projects)
    for bad in ("", "yes", "2"):
        answer = _toggle(client, numbers["alpha"], bad)
        assert answer.status_code == 400 and "shared=1" in answer.text, bad
        assert not _shared(app, numbers["alpha"])
    loose = _toggle(client, numbers["loose"], "1")  # an experiment of no project has no collaborators
    assert loose.status_code == 400 and "in no project" in loose.text and not _shared(app, numbers["loose"])
    # Without a CSRF token: refused, nothing changes.
    assert client.post(f"/experiments/{numbers['alpha']}/agent-logs-share", data={"shared": "1"}).status_code == 400
    assert not _shared(app, numbers["alpha"])
    # A collaborator cannot flip it (the owner's route): 403, nothing changes.
    ada = member_client("ada@example.org", "collaborator", projects=(0,))
    page = ada.get("/m/alpha")
    refused = ada.post(f"/experiments/{numbers['alpha']}/agent-logs-share",
                       data={"shared": "1", "csrf_token": csrf_from(page.text)})
    assert refused.status_code == 403 and not _shared(app, numbers["alpha"])
