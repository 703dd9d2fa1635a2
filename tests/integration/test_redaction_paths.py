"""Redaction on every way in: tags, artifact names, plans' specs and JSON
artifacts, notes, progress messages and uploaded pod logs — and a plan whose command references `$SAGAN_POD_PROGRESS_TOKEN` (as the old
system's plans do) is stored exactly as written and accepted, not broken and refused."""
from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from models import Artifact, PlanVersion, db
from services.core.redact import REDACTED
from services.workflow import experiments
from tests.integration.test_dispatch import plan_with, pod_spec
from tests.integration.test_lean_ingest import flask_only
from tests.integration.test_progress_ingest import pod, post, upload  # noqa: F401
from tests.integration.test_tokens import _secret_in_database

GITHUB_TOKEN = "ghp_" + "Ab3dEf6hIj9lMn2pQr5tUv8xYz1bCd4fGh7j"


def test_tags_are_redacted(app, api_client):
    """Is a token pasted into a tag stored as [REDACTED]?"""
    writer = api_client("read,write")
    response = writer.post("/api/experiments", json={"title": "Tagged", "tags": ["vision", GITHUB_TOKEN]})
    assert response.status_code == 201
    with app.app_context():
        tags = experiments.get_experiment(response.get_json()["experiment"]["number"]).tags
    assert tags == ["vision", REDACTED]


def test_artifact_names_and_json_artifacts_are_redacted_and_stay_valid(app, client, pod):  # noqa: F811
    """Is a key in an artifact's name removed, and a JSON artifact redacted per value so it
    still parses?"""
    _, secret, _ = pod
    body = json.dumps({"config": {"WANDB_API_KEY": "wandb-abcdef0123456789", "lr": 0.1},
                       "cmd": 'curl -H "authorization: Bearer $SAGAN_POD_PROGRESS_TOKEN" $URL'}).encode()
    assert upload(client, secret, f"run-{GITHUB_TOKEN}.json", body).status_code == 201
    with app.app_context():
        artifact = db.session.scalar(sa.select(Artifact))
        stored = json.loads(artifact.content)
    assert GITHUB_TOKEN not in artifact.name and REDACTED in artifact.name
    assert stored["config"] == {"WANDB_API_KEY": REDACTED, "lr": 0.1}
    assert stored["cmd"] == 'curl -H "authorization: Bearer $SAGAN_POD_PROGRESS_TOKEN" $URL'


def test_a_plan_referencing_the_pod_token_variable_is_accepted_unchanged(app, api_client, make_experiment):
    """Is a plan whose spec's command sends `Bearer $SAGAN_POD_PROGRESS_TOKEN` stored byte for
    byte and given an approval request (it used to be rewritten into invalid JSON and refused)?"""
    number = make_experiment("Old-system plan", status="planning")
    spec = pod_spec(dockerArgs='bash -lc \'curl -H "authorization: Bearer $SAGAN_POD_PROGRESS_TOKEN" '
                               '-d @p.json "$SAGAN_PROGRESS_URL"\'')
    markdown = plan_with(spec)
    response = api_client("read,write").post(f"/api/experiments/{number}/plans", json={"markdown": markdown})
    assert response.status_code == 201, response.get_json()["problems"]
    with app.app_context():
        assert db.session.scalar(sa.select(PlanVersion.markdown)) == markdown


def test_a_secret_in_a_plans_spec_env_is_redacted_and_the_spec_still_parses(app, api_client, make_experiment):
    """Is a literal key in the spec's env removed from the stored plan, leaving valid JSON?"""
    number = make_experiment("Leaky plan", status="planning")
    markdown = plan_with(pod_spec(env={"WANDB_API_KEY": "wandb-abcdef0123456789", "SEED": "3"}))
    response = api_client("read,write").post(f"/api/experiments/{number}/plans", json={"markdown": markdown})
    assert response.status_code == 201, response.get_json()["problems"]
    assert response.get_json()["plan"]["spec"]["env"] == {"WANDB_API_KEY": REDACTED, "SEED": "3"}
    with app.app_context():
        assert "wandb-abcdef0123456789" not in db.session.scalar(sa.select(PlanVersion.markdown))


# Assembled from parts so this file holds no string a secret scanner flags.
VENDOR_SECRETS = {
    "slack-bot": "xoxb-" + "123456789012-1234567890123-" + "AbCdEfGhIjKlMnOpQrStUvWx",
    "slack-app": "xapp-" + "1-A0123456789-1234567890123-" + "0123456789abcdef" * 4,
    "google-api-key": "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K_L-mN0pQrStU",
    "gitlab": "glpat-" + "xY1zA2bC3dE4fG5hI6jK",
    "openai-project": "sk-proj-" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv_w-xYz",
    "stripe-restricted": "rk_live_" + "51Hx" + "a1B2" * 6,
    "jwt": "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9" + "." + "eyJzdWIiOiIxMjM0NTY3ODkwIiwicm9sZSI6InNlcnZpY2UifQ"
           + "." + "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c",
    "aws-secret-beside-its-id": "AKIA" + "IOSFODNN7EXAMPLE,wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "slack-webhook": "https://hooks.slack.com/services/" + "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX",
}


@pytest.mark.parametrize("secret", VENDOR_SECRETS.values(), ids=VENDOR_SECRETS.keys())
def test_vendor_secrets_are_stored_redacted_on_every_way_in(app, client, api_client, make_experiment, pod, secret):  # noqa: F811
    """Is a Slack, Google, GitLab, OpenAI, Stripe or AWS credential, a JWT or a Slack webhook
    URL stored nowhere when it arrives in an agent's note, a pod's progress message (through
    the lean layer and through the view) and the pod's uploaded log?"""
    _, token, number = pod
    writer = api_client("read,write")
    noted = writer.post(f"/api/experiments/{number}/workflow-events",
                        json={"marker": "epm:progress", "note": f"wandb login said {secret} then"})
    assert noted.status_code == 201, noted.get_json()
    assert post(client, token, {"progressPct": 10, "message": f"env: {secret}", "seq": 1}).status_code == 200
    assert post(flask_only(app), token, {"progressPct": 20, "message": f"again {secret}", "seq": 2}).status_code == 200
    log = f"step 1\nexport CREDS={secret}\nraw {secret} in the middle\nstep 2\n".encode()
    assert upload(client, token, "sagan-logs/run.log", log, "text/plain").status_code == 201
    for fragment in (secret, secret.split(",")[-1], secret.rsplit("/", 1)[-1]):
        assert _secret_in_database(app, fragment) == [], fragment
    with app.app_context():
        stored_log = db.session.scalar(sa.select(Artifact.content)).decode()
    assert stored_log.startswith("step 1\n") and stored_log.count(REDACTED) >= 2
