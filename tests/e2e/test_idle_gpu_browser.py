"""The idle-GPU flag as the owner meets it in a browser: a paid pod whose GPUs (a stand-in
`nvidia-smi`, as in tests/integration/test_idle_gpus.py) sat at 0 % for 15 minutes is flagged
on its pod card, its board card and the owner's queue, at 1280 and 390 px, light and dark."""
from __future__ import annotations

import os
import uuid
from datetime import timedelta
from pathlib import Path

import pytest

from models import Pod, db
from services.core import clock
from services.dispatch import tokens
from services.workflow import experiments, runs
from tests.e2e.actions import DESKTOP, PHONE, assert_clean
from tests.integration.test_idle_gpus import _helper, _paid, _sample, _stand_in

pytestmark = pytest.mark.browser

FLAG = "pod 2: GPU idle for 15 min — $1.49/h"


def _photograph(page, name: str) -> None:
    """With SAGAN_SCREENSHOTS_DIR set (docs/screenshots/README.md), keep what the owner sees."""
    shots = os.environ.get("SAGAN_SCREENSHOTS_DIR")
    if shots:
        page.screenshot(path=str(Path(shots) / name))


@pytest.fixture
def idle_pod(app, make_experiment, live_server, tmp_path, monkeypatch):
    """A RunPod pod at $1.49/h whose sampler posted 0 % GPU for 15 minutes (on the project's clock)."""
    lines = tmp_path / "gpus.csv"
    lines.write_text("0, 1530, 24564\n0, 1210, 24564\n")
    _stand_in(tmp_path / "bin", lines)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}")
    number = make_experiment("Sweep on two A100s", status="running")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        run = runs.create_run(kind="experiment", agent="provisioner", request="d", scope_id=experiment.id,
                              status="waiting")
        secret, digest = tokens.new_token()
        pod = Pod(id=uuid.uuid4(), agent_run_id=run.id, experiment_id=experiment.id, account="local",
                  name=f"sagan-{number}-idle-0-1", status="running", progress_token_hash=digest)
        db.session.add(pod)
        db.session.commit()
        pod_id = pod.id
    _paid(app, pod_id)
    helper = _helper()
    for _ in range(31):
        _sample(helper, live_server, secret, tmp_path)
        clock.advance(timedelta(seconds=30))
    return number


@pytest.mark.parametrize("viewport, scheme", [(DESKTOP, "light"), (PHONE, "dark")], ids=["1280-light", "390-dark"])
def test_the_idle_flag_is_on_the_pod_card_the_board_and_the_queue(browser_session, owner_account, idle_pod,
                                                                  viewport, scheme):
    """Does the owner see the flag, in words with its price, on the pod card, the board card and
    the queue — visible, not only present in the HTML?"""
    size = "desktop" if viewport is DESKTOP else "phone"
    session = browser_session(viewport, scheme)
    page = session.login()
    page.goto(f"/experiments/{idle_pod}")
    flag = page.get_by_text(FLAG).first
    flag.scroll_into_view_if_needed()
    assert flag.is_visible()
    _photograph(page, f"pod-card-idle-gpu-{size}-{scheme}.png")
    page.goto("/board")
    card = page.locator(f"#card-{idle_pod}")
    card.scroll_into_view_if_needed()
    assert "GPU idle for 15 min" in card.inner_text()
    page.goto("/your-turn")
    assert page.get_by_text(FLAG).first.is_visible()
    _photograph(page, f"your-turn-idle-gpu-{size}-{scheme}.png")
    assert_clean(session)
