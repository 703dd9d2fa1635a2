"""scripts/sagan_state.py ideas (SPEC §12.4, §9.4): list, show, start from a clean result by its
label, answer, add a card and promote it, against a live server as a real `python3`
subprocess; refusals print the server's sentence and exit 1, bad usage exits 2 without a request."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from models import Experiment, db
from models.ideation import IdeaCard, IdeationSession
from services.core.actors import Actor
from services.results import results

CLI = Path(__file__).resolve().parents[2] / "scripts" / "sagan_state.py"
RESULT_HTML = (Path(__file__).resolve().parents[1] / "fixtures" / "results" / "clean_result.html").read_text()


@pytest.fixture
def cli(live_server, api_client):
    token = api_client("read,write").secret

    def run(*args, stdin: str | None = None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SAGAN_")}
        env.update(SAGAN_BASE_URL=live_server.url, SAGAN_API_TOKEN=token)
        return subprocess.run([sys.executable, "-I", str(CLI), *args], capture_output=True, text=True, env=env,
                              timeout=60, input=stdin)
    return run


@pytest.fixture
def clean_result(app, make_experiment):
    number = make_experiment("Does the curriculum speed up the 125M model?", status="awaiting_promotion")
    with app.app_context():
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == number))
        results.save_clean_result(experiment, RESULT_HTML, Actor("agent", None, "analyzer"),
                                  title="Curriculum order barely matters (MODERATE confidence)")
        db.session.commit()
    return number


def _count(app, model) -> int:
    with app.app_context():
        return db.session.scalar(sa.select(sa.func.count()).select_from(model))


def test_ideas_from_start_to_a_promoted_experiment(cli, app, clean_result):
    assert "no ideation sessions" in cli("ideas", "--summary").stdout
    started = cli("ideas", "start", "clean_result", f"R{clean_result}")
    assert started.returncode == 0, started.stderr
    assert "I1 started on clean result “Curriculum order barely matters (MODERATE confidence)”" in started.stdout
    answered = cli("ideas", "answer", "I1", "4", "-", stdin="Two more seeds at 1B.")
    assert answered.returncode == 0 and "I1: answer 4 saved" in answered.stdout
    added = cli("ideas", "card", "I1", "--title", "Ablate the data order", "--body", "Shuffle *within* stages.")
    assert added.returncode == 0, added.stderr
    card_id = added.stdout.split()[1]
    shown = json.loads(cli("ideas", "show", "I1").stdout)["session"]
    assert shown["questions"][3]["answer"] == "Two more seeds at 1B."
    assert [(c["id"], c["status"]) for c in shown["cards"]] == [(card_id, "open")]
    summary = cli("ideas", "show", "I1", "--summary").stdout
    assert "→ Two more seeds at 1B." in summary and "[open]" in summary
    promoted = cli("ideas", "promote", "I1", card_id, "--to", "experiment")
    assert promoted.returncode == 0 and "Promoted to #" in promoted.stdout
    again = cli("ideas", "promote", "I1", card_id, "--to", "experiment")
    assert again.returncode == 0 and "promoted already" in again.stdout
    listed = json.loads(cli("ideas").stdout)["sessions"]
    assert [(s["cite"], s["answered"], s["promotedCards"]) for s in listed] == [("I1", 1, 1)]
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(Experiment)
                                 .where(Experiment.status == "proposed")) == 1


def test_ideas_refusals_exit_1_and_usage_errors_exit_2(cli, app, clean_result):
    assert cli("ideas", "start", "paper", "R1").returncode == 2  # not a source kind: usage
    assert cli("ideas", "answer", "I1", "9", "x").returncode == 2
    assert cli("ideas", "promote", "I1", "abc").returncode == 2  # --to is required
    missing = cli("ideas", "start", "belief", "B42")
    assert missing.returncode == 1 and "error 404" in missing.stderr and "No belief" in missing.stderr
    assert cli("ideas", "start", "clean_result", f"R{clean_result}").returncode == 0
    empty = cli("ideas", "card", "I1", "--title", "  ")
    assert empty.returncode == 1 and "Give the idea a title" in empty.stderr
    unknown = cli("ideas", "show", "I7")
    assert unknown.returncode == 1 and "No ideation session I7" in unknown.stderr
    assert (_count(app, IdeationSession), _count(app, IdeaCard)) == (1, 0)


def test_runs_filter_by_classification(cli, app):
    refused = cli("runs", "--classification", "great")
    assert refused.returncode == 1 and "pending, useful, not_useful, archived" in refused.stderr
    assert json.loads(cli("runs", "--classification", "useful").stdout) == {"runs": []}
