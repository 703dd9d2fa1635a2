"""The research tools through a whole agent run: the real loop, a real RQ worker in burst mode,
the app's `anthropic` client against the loopback fake. Kept minimal (a tool turn, then
end_turn) because the loop is changing with the model-API work."""
from __future__ import annotations

import re
import shutil

import pytest
import sqlalchemy as sa

from models import RunEvent, db
from services.core.actors import Actor
from services.dispatch import progress
from services.results import results
from services.workflow import experiments, jobs, orchestration, runs
from tests.fakes.anthropic_server import reply, text, tool_use
from tests.integration.code_fixtures import research_repo  # noqa: F401
from tests.integration.test_research_tools import add_pod, png


def _tool_events(run_id):
    return [(e.event_type, e.body, e.metadata_) for e in db.session.scalars(
        sa.select(RunEvent).where(RunEvent.run_id == run_id, RunEvent.event_type.in_(("tool_call", "tool_result")))
        .order_by(RunEvent.seq))]


def test_a_planner_reads_the_training_script_and_a_past_experiment(app, fake_anthropic, worker, make_experiment,
                                                                   research_repo):  # noqa: F811
    earlier = make_experiment("Mean of three numbers")
    with app.app_context():
        results.save_clean_result(experiments.get_experiment(earlier), "<p>Results: the mean is 2.</p>",
                                  Actor("agent", None, "analyzer"), title="The mean is 2 (HIGH confidence)")
        db.session.commit()
    number = make_experiment("Mean of four numbers", status="planning")
    fake_anthropic.script(
        reply(tool_use("repo_read_file", {"path": "run.py"}), tool_use("read_experiment", {"number": earlier})),
        reply(text("I have what I need.")))
    with app.app_context():
        run_id = orchestration.start_planner(experiments.get_experiment(number).id, Actor("owner"), {},
                                             mode="plan").id
    worker()
    with app.app_context():
        events = _tool_events(run_id)
        assert [(k, m["tool"]) for k, _, m in events] == [
            ("tool_call", "repo_read_file"), ("tool_call", "read_experiment"),
            ("tool_result", "repo_read_file"), ("tool_result", "read_experiment")]
        assert not any(m["is_error"] for k, _, m in events if k == "tool_result")
    sent = fake_anthropic.requests[1].body["messages"][-1]["content"]
    assert "from stats import mean" in sent[0]["content"] and "The mean is 2" in sent[1]["content"]


def test_an_analyzer_sees_a_figure_as_an_image_block(app, fake_anthropic, worker, make_experiment):
    number = make_experiment("Figure", status="verifying")
    with app.app_context():
        progress.store_artifact(add_pod(number), "loss.png", png(), None)
        experiment = experiments.get_experiment(number)
        run = runs.create_run(kind="apply", agent="analyzer", request="Analyse.", scope_id=experiment.id)
        db.session.commit()
        run_id = run.id
        jobs.enqueue_run(run_id)
    fake_anthropic.script(reply(tool_use("read_artifact", {"name": "loss.png"})), reply(text("A grey pixel.")))
    worker()
    result = fake_anthropic.requests[1].body["messages"][-1]["content"][0]
    assert result["type"] == "tool_result" and result["content"][0]["type"] == "text"
    assert result["content"][1]["type"] == "image" and result["content"][1]["source"]["media_type"] == "image/png"
    with app.app_context():
        assert runs.get_run(run_id).status == "completed"


DRAW = '''
import pandas as pd, matplotlib.pyplot as plt
frame = pd.read_csv("/artifacts/curve.csv")
print("final loss", frame["loss"].iloc[-1])
fig, ax = plt.subplots(figsize=(3, 2), dpi=50)
ax.plot(frame["step"], frame["loss"])
fig.savefig("loss.png")
'''


def test_an_analyzer_lists_artifacts_draws_a_figure_and_embeds_it_in_the_clean_result(
        app, fake_anthropic, worker, make_experiment):
    from tests.integration.test_analysis import _env_built
    if not _env_built(app) or shutil.which("bwrap") is None:
        pytest.skip("needs bubblewrap and the analysis environment (make test builds it)")
    number = make_experiment("Figure", status="verifying")
    with app.app_context():
        progress.store_artifact(add_pod(number), "curve.csv", b"step,loss\n1,3.0\n2,2.5\n3,2.2\n", None)
        run = runs.create_run(kind="apply", agent="analyzer", request="Analyse.",
                              scope_id=experiments.get_experiment(number).id)
        db.session.commit()
        run_id = run.id
        jobs.enqueue_run(run_id)

    def embed_the_figure(body):
        reported = body["messages"][-1]["content"][1]["content"]
        text_part = reported[0]["text"] if isinstance(reported, list) else reported
        name = re.search(r"- (analysis/\S+/loss\.png) ", text_part).group(1)
        return reply(tool_use("write_clean_result", {"html": f'<h2>TL;DR</h2><ul><li>Results: loss 2.2</li></ul>'
                                                             f'<figure id="figure"><img src="artifact:{name}" '
                                                             f'alt="Loss"></figure>'}))
    fake_anthropic.script(reply(tool_use("list_artifacts", {}), tool_use("run_analysis", {"code": DRAW})),
                          embed_the_figure, reply(text("Done.")))
    worker()
    with app.app_context():
        calls = [m["tool"] for k, _, m in _tool_events(run_id) if k == "tool_call"]
        assert calls == ["list_artifacts", "run_analysis", "write_clean_result"]
        assert not any(m["is_error"] for k, _, m in _tool_events(run_id) if k == "tool_result")
        body = experiments.get_experiment(number).body
        assert 'src="data:image/png;base64,' in body and runs.get_run(run_id).status == "completed"
