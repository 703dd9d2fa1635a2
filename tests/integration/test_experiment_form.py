"""The new-experiment form `/experiments/new` (SPEC §1 limits, STYLE §8: errors re-render
the form at 200 with a message; nothing is created)."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

from models import Experiment, WorkflowEvent, db
from tests.integration.pages import text, timeline_notes


def _count(app) -> int:
    with app.app_context():
        return db.session.scalar(sa.select(sa.func.count(Experiment.id)))


def _post(client, owner, follow_redirects=False, **fields):
    data = {"title": "A valid title", "kind": "experiment", "priority": "normal", **fields}
    data["csrf_token"] = owner.csrf()
    return client.post("/experiments/new", data=data, follow_redirects=follow_redirects)


def test_form_page_renders(client, owner):
    """Does the new-experiment page show the form with title, kind, priority and tags?"""
    body = text(client.get("/experiments/new"))
    for name in ("title", "hypothesis", "kind", "priority", "compute_size", "tags"):
        assert f'name="{name}"' in body


@pytest.mark.parametrize("fields, message", [
    ({"title": ""}, "Title is required."),
    ({"title": "   \t  "}, "Title is required."),
    ({"title": "x" * 301}, "Title is 301 characters; the limit is 300."),
    ({"kind": "poem"}, "Kind must be one of: experiment, infra, survey."),
    ({"priority": "asap"}, "Priority must be one of: low, normal, high, urgent."),
    ({"compute_size": "galactic"}, "Compute size must be one of: none, small, medium, large."),
    ({"tags": ",".join(f"tag{i}" for i in range(51))}, "At most 50 tags."),
    ({"tags": "ok, " + "t" * 81}, "longer than 80 characters"),
    ({"hypothesis": "h" * 50_001}, "Hypothesis is 50001 characters; the limit is 50000."),
])
def test_bad_input_rerenders_the_form_with_a_message(app, client, owner, fields, message):
    """Is bad input answered by the form again (after a redirect: a reload is a harmless GET)
    with a clear message, nothing created?"""
    refused = _post(client, owner, **fields)
    assert refused.status_code == 303 and refused.headers["Location"].endswith("/experiments/new")
    response = client.get(refused.headers["Location"])
    assert response.status_code == 200
    body = text(response)
    assert message in body
    assert 'role="alert"' in body
    assert 'name="title"' in body  # the form is shown again
    assert _count(app) == 0


def test_rerendered_form_keeps_what_was_typed(client, owner):
    """Does the form keep the typed values after an error, so nothing has to be retyped?"""
    response = _post(client, owner, title="Keep me", hypothesis="A careful guess", kind="poem",
                     tags="alpha, beta", follow_redirects=True)
    body = text(response)
    assert 'value="Keep me"' in body
    assert "A careful guess" in body
    assert 'value="alpha, beta"' in body


def test_limits_at_the_edge_are_accepted(app, client, owner):
    """Are a 300-char title, 50 tags and an 80-char tag accepted?"""
    tags = [f"tag{i}" for i in range(49)] + ["t" * 80]
    response = _post(client, owner, title="x" * 300, tags=",".join(tags))
    assert response.status_code == 303
    with app.app_context():
        experiment = db.session.scalar(sa.select(Experiment))
        assert len(experiment.title) == 300
        assert experiment.tags == tags


def test_valid_experiment_redirects_to_its_page_with_a_created_note(app, client, owner):
    """Does a valid form redirect (303) to /experiments/<n>, which shows "Experiment created."?"""
    response = _post(client, owner, title="  Does   label smoothing help?  ", kind="survey",
                     priority="high", tags="probes, cifar, probes", hypothesis="It helps a bit.")
    assert response.status_code == 303
    location = response.headers["Location"]
    assert location == "/experiments/1"
    page = client.get(location)
    body = text(page)
    assert "Does label smoothing help?" in body  # whitespace folded
    assert timeline_notes(page) == ["Experiment created."]
    with app.app_context():
        experiment = db.session.scalar(sa.select(Experiment))
        assert (experiment.status, experiment.kind, experiment.priority) == ("proposed", "survey", "high")
        assert experiment.tags == ["probes", "cifar"]
        event = db.session.scalar(sa.select(WorkflowEvent))
        assert (event.event_type, event.actor_kind, event.note) == ("note", "owner", "Experiment created.")


def test_secrets_typed_into_the_form_are_redacted(app, client, owner):
    """Is an API key pasted into the title or hypothesis stored redacted?"""
    secret = "sk_" + "L" * 32
    response = _post(client, owner, title=f"Try key {secret}", hypothesis=f"ANTHROPIC_API_KEY={secret}")
    assert response.status_code == 303
    body = client.get(response.headers["Location"]).text
    assert secret not in body
    with app.app_context():
        experiment = db.session.scalar(sa.select(Experiment))
        assert secret not in experiment.title and secret not in experiment.hypothesis
