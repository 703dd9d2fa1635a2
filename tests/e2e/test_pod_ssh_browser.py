"""The pod card's SSH line in a real browser, at 390 px and 1280 px: a pod created after a key
was registered shows the exact ssh command, whole and selectable, without widening the page; a
pod created with no key says so instead of showing a command that leads nowhere.

With SAGAN_SCREENSHOTS_DIR set, the pods section and Settings' SSH keys are photographed there
at both widths."""
from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from models import Pod, db
from services.core import settings
from services.dispatch import ssh_keys
from services.workflow import experiments
from tests.e2e.actions import DESKTOP, PHONE, assert_clean
from tests.e2e.fit import assert_no_sideways_scroll
from tests.unit.test_ssh_keys import ED25519

pytestmark = pytest.mark.browser


def _pods(app, number: int) -> None:
    """A key registered on the team account, a pod made with it (running, RunPod's direct address)
    and one made before it (no key)."""
    with app.app_context():
        experiment = experiments.get_experiment(number)
        settings.put(ssh_keys.SETTING, {"team": {"keys": [ED25519]}})
        for index, keys, address in ((0, 1, ("root", "203.0.113.10", 10341)), (1, 0, (None, None, None))):
            user, host, port = address
            db.session.add(Pod(id=uuid.uuid4(), experiment_id=experiment.id, account="team", run_index=index,
                               name=f"sagan-{number}-ssh-{index}", status="running", cost_per_hr=1.89,
                               gpu_type_id="NVIDIA A100-SXM4-80GB", gpu_count=1, cloud_type="SECURE",
                               provider_pod_id=f"ssh{index}{number}", ssh_user=user, ssh_host=host, ssh_port=port,
                               metadata_={"ssh_keys": keys}))
        db.session.commit()


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["390px", "1280px"])
def test_the_pod_card_shows_the_ssh_command_or_why_there_is_none(app, browser_session, owner_account,
                                                                  make_experiment, fake_runpod, viewport):
    number = make_experiment("Reach the pod over SSH", status="running")
    _pods(app, number)
    session = browser_session(viewport)
    page = session.login()
    page.goto(f"/experiments/{number}")
    with_key = page.locator(".pod-card", has_text=f"sagan-{number}-ssh-0")
    command = with_key.locator(".pod-ssh code.ssh-command")
    command.wait_for()
    assert command.inner_text() == "ssh root@203.0.113.10 -p 10341"
    assert command.is_visible() and command.bounding_box()["width"] <= viewport["width"]
    without = page.locator(".pod-card", has_text=f"sagan-{number}-ssh-1").locator(".pod-ssh")
    assert "no key registered when this pod was created" in without.inner_text()
    assert without.locator("code").count() == 0
    assert_no_sideways_scroll(page, "the experiment page")
    shots = os.environ.get("SAGAN_SCREENSHOTS_DIR")
    if shots:
        page.locator("#pods").screenshot(path=str(Path(shots) / f"pod-ssh-{viewport['width']}.png"))
    page.goto("/settings#ssh-keys")  # where the key came from: its fingerprint, and the form
    keys = page.locator("#ssh-keys")
    assert "SHA256:cqK7AHqS1EbB/84rVtBZh0CziQjWHX1wEZx6WTQ2S3A" in keys.inner_text()
    assert_no_sideways_scroll(page, "/settings")
    if shots:
        keys.screenshot(path=str(Path(shots) / f"settings-ssh-{viewport['width']}.png"))
    assert_clean(session)
