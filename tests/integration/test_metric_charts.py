"""Metric charts: the downsampled chart data (owner and mentor), its ETag, the page panels,
and the compare view reached from the experiments table."""
from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa

from models import Experiment, Pod, db
from services.core import clock
from services.core.actors import Actor
from services.dispatch import metrics
from services.pipeline import demo
from services.results import results, shares
from services.workflow import runs

OWNER = Actor("owner", None, "Owner")


def _pod(experiment_id, index: int) -> Pod:
    run = runs.create_run(kind="apply", agent="bench", request="d", scope_id=experiment_id, status="waiting")
    pod = Pod(id=uuid.uuid4(), agent_run_id=run.id, experiment_id=experiment_id, account="local",
              name=f"sagan-chart-{uuid.uuid4().hex[:8]}", run_index=index, status="running")
    db.session.add(pod)
    db.session.flush()
    return pod


def _store(pod: Pod, name: str, steps, value_of, seq_start: int = 1) -> None:
    """Points through the real ingest path, in batches of 1,000."""
    steps = list(steps)
    for batch_index, start in enumerate(range(0, len(steps), metrics.BATCH_MAX)):
        chunk = steps[start:start + metrics.BATCH_MAX]
        batch = metrics.parse_batch({"seq": seq_start + batch_index,
                                     "points": [{"step": s, "name": name, "value": value_of(s)} for s in chunk]})
        assert metrics.record_batch(pod, batch)


@pytest.fixture
def charted(app, make_experiment):
    """An experiment with two runs: run 0 posts 5,000 loss points, run 1 posts 300; both post accuracy."""
    number = make_experiment("Charted", status="running")
    with app.app_context():
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == number))
        first, second = _pod(experiment.id, 0), _pod(experiment.id, 1)
        _store(first, "loss", range(5000), lambda s: 2.0 / (1 + s / 100) + (0.5 if s == 1234 else 0))
        _store(second, "loss", range(0, 3000, 10), lambda s: 2.1 / (1 + s / 100), seq_start=100)
        _store(first, "val/accuracy [%]", range(0, 5000, 500), lambda s: 50 + s / 100, seq_start=200)
        _store(second, "val/accuracy [%]", range(0, 3000, 500), lambda s: 49 + s / 100, seq_start=300)
        db.session.commit()
    return number


def test_chart_data_downsamples_long_series_and_keeps_short_ones(app, owner, charted, client):
    """5,000 points come back as at most 1,000 buckets whose band keeps the spike; 300 points
    come back as they are; the runs are labelled and in run order."""
    body = client.get(f"/experiments/{charted}/metrics/data?name=loss").get_json()
    assert body["label"] == "loss" and body["unit"] is None
    long, short = body["series"]
    assert (long["label"], short["label"]) == ("run 0", "run 1")
    assert long["downsampled"] is True and long["points"] == 5000
    assert 900 <= len(long["x"]) <= 1000 and long["x"] == sorted(long["x"])
    spike = 2.0 / (1 + 12.34) + 0.5
    bucket = next(i for i, high in enumerate(long["max"]) if high == pytest.approx(spike))  # kept in the band
    assert long["y"][bucket] < spike - 0.2 and long["x"][bucket] == pytest.approx(1234, abs=5)
    assert all(lo <= y <= hi for lo, y, hi in zip(long["min"], long["y"], long["max"]))
    assert short["downsampled"] is False and short["x"] == [float(s) for s in range(0, 3000, 10)]
    assert short["y"][0] == pytest.approx(2.1) and short["y"] == short["min"] == short["max"]


def test_chart_data_carries_the_unit_and_answers_304_when_nothing_changed(app, owner, charted, client):
    """The unit comes from the bracketed suffix; a repeat with the ETag is a 304 until a new
    point arrives."""
    url = f"/experiments/{charted}/metrics/data?name=val/accuracy%20%5B%25%5D"
    first = client.get(url)
    assert first.status_code == 200 and first.get_json()["unit"] == "%"
    assert first.get_json()["label"] == "val/accuracy"
    etag = first.headers["ETag"]
    assert client.get(url, headers={"If-None-Match": etag}).status_code == 304
    with app.app_context():
        pod = db.session.scalar(sa.select(Pod).where(Pod.run_index == 0))
        _store(pod, "val/accuracy [%]", [6000], lambda s: 99.0, seq_start=999)
        db.session.commit()
    after = client.get(url, headers={"If-None-Match": etag})
    assert after.status_code == 200 and after.get_json()["series"][0]["y"][-1] == 99.0


@pytest.mark.parametrize("query", ["", "?name=", "?name=" + "x" * 121])
def test_chart_data_without_a_good_name_is_400(owner, charted, query, client):
    response = client.get(f"/experiments/{charted}/metrics/data{query}")
    assert response.status_code == 400 and "Name the metric" in response.get_data(as_text=True)


def test_chart_data_for_an_unknown_metric_or_experiment(owner, charted, client):
    """An unknown metric is an empty chart; an unknown experiment is a 404."""
    assert client.get(f"/experiments/{charted}/metrics/data?name=nope").get_json()["series"] == []
    assert client.get("/experiments/99999/metrics/data?name=loss").status_code == 404


def test_the_page_draws_one_chart_per_metric_with_the_cost_panel(owner, charted, client):
    """The experiment page has a chart per metric, pointing at its data, with uPlot loaded,
    and the cost ledger beside it."""
    page = client.get(f"/experiments/{charted}").get_data(as_text=True)
    assert page.count("data-metric-chart") == 2
    assert "vendor/uPlot.iife.min.js" in page and "js/metrics.js" in page
    assert f"/experiments/{charted}/metrics/data?name=loss" in page
    assert "latest" in page and "2 runs" in page and 'id="cost"' in page


def test_an_experiment_without_metrics_says_how_to_post_them(owner, make_experiment, client):
    number = make_experiment("No metrics")
    page = client.get(f"/experiments/{number}").get_data(as_text=True)
    assert "No metrics yet" in page and "data-metric-chart" not in page


def _share(app, number) -> str:
    """Promote the experiment's result to shared (charts reach a link only with a promoted
    result) and make a one-experiment link to it."""
    with app.app_context():
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == number))
        demo.walk_to(experiment, "awaiting_promotion")
        results.save_clean_result(experiment, "<p>The result.</p>", OWNER, title="Charted (HIGH confidence)")
        results.promote(experiment, "shared", OWNER, confirm_lint=True)
        _link, token = shares.create_link(scope="experiment", experiment=experiment)
        db.session.commit()
    return token


def test_the_mentor_sees_the_charts_through_the_share_link(app, client, charted):
    """The share page draws the same charts from its own token-scoped data route, without a session."""
    token = _share(app, charted)
    page = client.get(f"/s/{token}").get_data(as_text=True)
    assert page.count("data-metric-chart") == 2 and f"/s/{token}/metrics?name=loss" in page
    data = client.get(f"/s/{token}/metrics?name=loss")
    assert data.status_code == 200 and len(data.get_json()["series"]) == 2
    assert "Set-Cookie" not in data.headers and data.headers["X-Robots-Tag"].startswith("noindex")


def test_a_share_link_opens_no_other_experiments_metrics(app, client, charted, make_experiment):
    """Another experiment's number, an unknown token, or an unshared experiment: 404."""
    token = _share(app, charted)
    other = make_experiment("Not shared")
    assert client.get(f"/s/{token}/{other}/metrics?name=loss").status_code == 404
    assert client.get("/s/unknown-token/metrics?name=loss").status_code == 404


def test_a_share_link_charts_only_the_runs_the_result_was_promoted_with(app, owner, client, charted):
    """A run started after the promotion (the experiment reopened and rerun) is the owner's
    to see, not the mentor's, until the result is promoted again: its series and a metric
    only it posted stay off the share page and out of the share link's chart data."""
    token = _share(app, charted)
    clock.advance(timedelta(minutes=5))
    with app.app_context():
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == charted))
        rerun = _pod(experiment.id, 2)
        _store(rerun, "loss", range(50), lambda s: 9.0, seq_start=500)
        _store(rerun, "new metric", range(5), lambda s: 1.0, seq_start=600)
        db.session.commit()
    owner_data = client.get(f"/experiments/{charted}/metrics/data?name=loss").get_json()
    assert [line["label"] for line in owner_data["series"]] == ["run 0", "run 1", "run 2"]
    mentor = app.test_client()
    shared = mentor.get(f"/s/{token}/metrics?name=loss").get_json()
    assert [line["label"] for line in shared["series"]] == ["run 0", "run 1"]
    assert mentor.get(f"/s/{token}/metrics?name=new%20metric").get_json()["series"] == []
    page = mentor.get(f"/s/{token}").get_data(as_text=True)
    assert page.count("data-metric-chart") == 2 and "new metric" not in page and "2 runs" in page


def test_chart_data_needs_the_owner(client, charted):
    assert client.get(f"/experiments/{charted}/metrics/data?name=loss").status_code == 302


def test_compare_puts_metrics_and_costs_side_by_side(app, owner, charted, make_experiment, client):
    """Two experiments: a row each, a column per metric with the latest value (mean over runs
    and the spread), and a chart per metric overlaying both experiments' runs."""
    other = make_experiment("Baseline", status="running")
    with app.app_context():
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == other))
        _store(_pod(experiment.id, 0), "loss", range(100), lambda s: 1.5)
        db.session.commit()
    page = client.get(f"/experiments/compare?e={charted}&e={other}").get_data(as_text=True)
    assert "Baseline" in page and "Charted" in page
    assert re.search(r"<th[^>]*>loss</th>", page) and "val/accuracy" in page
    assert "1.5" in page and "2 runs" in page
    assert page.count("data-metric-chart") == 2
    assert f"/experiments/{other}/metrics/data?name=loss" in page and f"#{other} " in page


def test_the_experiments_table_links_to_compare(owner, charted, client):
    page = client.get("/experiments").get_data(as_text=True)
    assert 'action="/experiments/compare"' in page and f'name="e" value="{charted}"' in page


def test_compare_with_nothing_chosen_explains(owner, client):
    page = client.get("/experiments/compare")
    assert page.status_code == 200 and "Nothing to compare yet" in page.get_data(as_text=True)


@pytest.mark.parametrize("query,needle", [
    ("e=abc", "not an experiment number"), ("e=99999", "No experiment #99999"),
    ("e=" + "&e=".join(str(i) for i in range(1, 14)), "at most 12"), ("e=-3", "not an experiment number"),
])
def test_compare_bad_input_is_a_clear_400(owner, charted, query, needle, client):
    response = client.get(f"/experiments/compare?{query}")
    assert response.status_code == 400 and needle in response.get_data(as_text=True)


def test_the_chart_query_count_does_not_grow_with_points(app, owner, charted, client):
    """The chart data is the same few queries for 5,000 points a run as for 10."""
    from sqlalchemy import event
    with app.app_context():
        engine = db.engine
    counts = []
    for name in ("loss", "val/accuracy%20%5B%25%5D"):
        seen = []
        listener = lambda *_args, seen=seen: seen.append(1)  # noqa: E731
        event.listen(engine, "before_cursor_execute", listener)
        try:
            assert client.get(f"/experiments/{charted}/metrics/data?name={name}").status_code == 200
        finally:
            event.remove(engine, "before_cursor_execute", listener)
        counts.append(len(seen))
    assert counts[0] == counts[1] <= 6, counts
