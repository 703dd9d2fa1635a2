"""Extreme metric values: numbers near the largest double used to break a chart for ever
(PostgreSQL's avg() overflowed, so the owner's chart data, the experiment page and the
mentor's share link answered 500; on SQLite the data came back as Infinity, which is not
JSON), and a NaN in a progress post cost the pod its whole post. Now every ingest path keeps
NaN, ±Infinity and numbers past ±1e300 as non-finite points, the downsampler and the
summaries cannot overflow, the chart JSON is strict JSON, and the error page survives an
aborted transaction — on PostgreSQL and on SQLite."""
from __future__ import annotations

import json
import sys
import uuid

import flask_migrate
import pytest
import sqlalchemy as sa

from app import create_app
from blueprints import access
from config import TestConfig
from models import Experiment, MetricSeries, Pod, PodProgressPost, db
from services.core.actors import Actor
from services.dispatch import metrics, tokens
from services.pipeline import demo
from services.results import results, shares
from services.workflow import experiments, runs
from tests.conftest import OWNER_EMAIL, OWNER_PASSWORD, csrf_from
from tests.integration.test_migrations import MIGRATIONS, _scratch_app

BIG = sys.float_info.max  # 1.7976931348623157e308, a finite double
OWNER = Actor("owner", None, "Owner")
RESULT = "<p>Results: the loss diverged at step 2.</p>"


def strict_json(text: str):
    """JSON as a browser's JSON.parse reads it: NaN and Infinity are not JSON."""
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")
    return json.loads(text, parse_constant=refuse)


def _pod(experiment_id, index: int) -> tuple[uuid.UUID, str]:
    """A running pod of the experiment with its token: (pod id, secret)."""
    run = runs.create_run(kind="apply", agent="bench", request="d", scope_id=experiment_id, status="waiting")
    secret, digest = tokens.new_token()
    pod = Pod(id=uuid.uuid4(), agent_run_id=run.id, experiment_id=experiment_id, account="local",
              name=f"sagan-extreme-{uuid.uuid4().hex[:8]}", run_index=index, status="running",
              progress_token_hash=digest)
    db.session.add(pod)
    db.session.flush()
    return pod.id, secret


def _experiment_with_pods(title: str) -> tuple[int, list[tuple[uuid.UUID, str]]]:
    """An experiment walked to awaiting promotion, with two pods (committed)."""
    experiment = experiments.create_experiment({"title": title}, OWNER)
    demo.walk_to(experiment, "awaiting_promotion")
    pods = [_pod(experiment.id, 0), _pod(experiment.id, 1)]
    db.session.commit()
    return experiment.number, pods


def _share_promoted(number: int) -> str:
    """Save and promote the experiment's clean result; a one-experiment link to it."""
    experiment = experiments.get_experiment(number)
    results.save_clean_result(experiment, RESULT, OWNER, title="Diverged (LOW confidence)")
    results.promote(experiment, "shared", OWNER, confirm_lint=True)
    _link, token = shares.create_link(scope="experiment", experiment=experiment)
    db.session.commit()
    return token


def post_batch(client, secret, body):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post("/api/metrics", data=data, headers={"Authorization": f"Bearer {secret}",
                                                            "Content-Type": "application/json"})


# The attack: two pods post the largest doubles there are, several at one step (so a chart
# bucket sums them), and ±1e300 as their latest values (so the summary averages them).
ATTACK = [{"step": 0, "name": "loss", "value": BIG}, {"step": 0, "name": "loss", "value": BIG},
          {"step": 0, "name": "loss", "value": -BIG},
          {"step": 1, "name": "loss", "value": 1e300}, {"step": 1, "name": "loss", "value": -1e300},
          {"step": 2, "name": "loss", "value": 0.5}]


def _attack(client, pods) -> None:
    (_, first), (_, second) = pods
    assert post_batch(client, first, {"seq": 1, "points": ATTACK + [{"step": 3, "name": "loss", "value": 1e300}]}
                      ).status_code == 200
    assert post_batch(client, second, {"seq": 1, "points": ATTACK + [{"step": 3, "name": "loss", "value": -1e300}]}
                      ).status_code == 200


# --- PostgreSQL ---------------------------------------------------------------------------

@pytest.fixture
def attacked(app, client):
    """An experiment whose two pods posted the attack through POST /api/metrics."""
    with app.app_context():
        number, pods = _experiment_with_pods("Attacked")
    _attack(client, pods)
    return number


def test_extreme_values_leave_the_owners_chart_and_page_working(app, owner, attacked, client):
    """The owner's chart data answers strict JSON (the largest doubles kept as non-finite
    points, ±1e300 averaged without overflow), and the experiment page and the compare view
    render; before, PostgreSQL's avg() failed every one of them with a 500."""
    data = client.get(f"/experiments/{attacked}/metrics/data?name=loss")
    assert data.status_code == 200
    body = strict_json(data.get_data(as_text=True))
    for line in body["series"]:
        assert line["x"] == [0.0, 1.0, 2.0, 3.0]
        assert line["non_finite"] == [3, 0, 0, 0]  # ±1.797e308: marked, not drawn
        assert line["y"][:3] == [None, 0.0, 0.5] and line["min"][1] == -1e300 and line["max"][1] == 1e300
    page = client.get(f"/experiments/{attacked}")
    assert page.status_code == 200 and "data-metric-chart" in page.text
    # The two runs' latest values, 1e300 and -1e300, average to 0 (avg() overflowed on them).
    assert "latest 0 (runs -1.000e+300–1.000e+300)" in page.text
    compare = client.get(f"/experiments/compare?e={attacked}")
    assert compare.status_code == 200 and "1.000e+300" in compare.text


def test_extreme_values_leave_the_share_link_working(app, attacked, client):
    """The mentor's page and its chart data answer too, with strict JSON."""
    with app.app_context():
        token = _share_promoted(attacked)
    mentor = app.test_client()
    page = mentor.get(f"/s/{token}")
    assert page.status_code == 200 and "data-metric-chart" in page.text
    data = mentor.get(f"/s/{token}/metrics?name=loss")
    assert data.status_code == 200
    assert [line["non_finite"] for line in strict_json(data.get_data(as_text=True))["series"]] == [[3, 0, 0, 0]] * 2


def test_a_downsampled_bucket_of_huge_values_is_averaged_exactly(app, client):
    """A long series (downsampled, many points a bucket) of values past 1e100 is averaged as
    numeric: the mean of 1e300, -1e300 and 5 is 5/3, not an overflow."""
    with app.app_context():
        number, [(_, secret), _] = _experiment_with_pods("Huge buckets")
    values = [1e300, -1e300, 5.0]
    for seq in range(3):
        points = [{"step": seq * 1000 + i, "name": "big", "value": values[(seq * 1000 + i) % 3]} for i in range(1000)]
        assert post_batch(client, secret, {"seq": seq, "points": points}).status_code == 200
    with app.app_context():
        chart = metrics.chart_data(experiments.get_experiment(number), "big")
    line = chart["series"][0]
    assert line["downsampled"] and len(line["x"]) == 1000  # 3,000 points, three to a bucket
    assert line["y"][0] == pytest.approx(5 / 3) and line["max"][0] == 1e300


@pytest.mark.parametrize("raw, stored", [
    (b"NaN", None), (b"Infinity", None), (b"-Infinity", None), (b"1e999", None),
    (b"1" + b"0" * 400, None), (b"1.7976931348623157e308", None), (b"-1e301", None),
    (b"1e300", 1e300), (b"-1e300", -1e300), (b"7", 7.0),
])
def test_every_non_finite_form_is_kept_as_a_marked_point(app, client, raw, stored):
    """NaN, ±Infinity, an overflowing literal, a 401-digit integer and anything past ±1e300
    is stored as a non-finite point (the answer counts it); ±1e300 itself is a number."""
    with app.app_context():
        number, [(pod_id, secret), _] = _experiment_with_pods("Forms")
    body = (b'{"seq": 1, "points": [{"step": 0, "name": "loss", "value": 1.0}, '
            b'{"step": 1, "name": "loss", "value": ' + raw + b"}]}")
    answer = post_batch(client, secret, body)
    assert answer.status_code == 200
    expected = {"ok": True, "points": 2, "duplicate": False, **({"non_finite": 1} if stored is None else {})}
    assert answer.get_json() == expected
    with app.app_context():
        series = db.session.scalars(sa.select(MetricSeries).where(MetricSeries.pod_id == pod_id)).one()
        assert (series.points, series.last_value) == (2, stored)
        assert (series.min_value, series.max_value) == (min(1.0, stored or 1.0), max(1.0, stored or 1.0))
        chart = metrics.chart_data(experiments.get_experiment(number), "loss")
    assert chart["series"][0]["y"] == [1.0, stored]
    assert chart["series"][0]["non_finite"] == [0, 1 if stored is None else 0]


@pytest.mark.parametrize("value", ['"NaN"', '"1.5"', "true", "null", "[1]", '{"v": 1}'])
def test_a_value_that_is_not_a_number_is_refused_by_index(app, client, value):
    """Text, a bool, null, a list or an object: a 400 naming the point, nothing stored."""
    with app.app_context():
        _number, [(pod_id, secret), _] = _experiment_with_pods("Not numbers")
    body = ('{"seq": 1, "points": [{"step": 0, "name": "loss", "value": 1}, '
            '{"step": 1, "name": "loss", "value": ' + value + '}]}').encode()
    answer = post_batch(client, secret, body)
    assert answer.status_code == 400 and "points[1].value must be a number" in answer.get_json()["message"]
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(MetricSeries)) == 0


def test_a_series_summary_merges_non_finite_batches_in_any_order(app, client):
    """A batch of only NaN first, finite points after, then a NaN at the highest step: the
    range is the finite points', the latest value is not finite, and the page says so."""
    with app.app_context():
        number, [(pod_id, secret), _] = _experiment_with_pods("Merge")
    for seq, points in ((1, [(5, "NaN")]), (2, [(0, "3.0"), (1, "-2.0")]), (3, [(9, "Infinity")]),
                        (4, [(2, "4.0")])):
        raw = ('{"seq": %d, "points": [%s]}' % (seq, ", ".join(
            '{"step": %d, "name": "loss", "value": %s}' % point for point in points))).encode()
        assert post_batch(client, secret, raw).status_code == 200
    with app.app_context():
        series = db.session.scalars(sa.select(MetricSeries).where(MetricSeries.pod_id == pod_id)).one()
        assert (series.points, series.first_step, series.last_step) == (5, 0, 9)
        assert (series.last_value, series.min_value, series.max_value) == (None, -2.0, 4.0)
        summary = metrics.summaries_for([series.experiment_id])[series.experiment_id]["loss"]
        assert (summary.last_value, summary.last_non_finite, summary.min_value) == (None, 1, -2.0)


def test_a_progress_posts_non_finite_metrics_are_kept_as_null(app, client, make_live_pod, monkeypatch):
    """Through the view and through the lean layer alike: NaN, Infinity, the largest double
    and a 401-digit integer are stored as null (JSON has no NaN) and the post is kept;
    before, NaN refused the whole post and the integer was a 500."""
    from front import lean_ingest
    from tests.integration.test_lean_ingest import _layer
    live = make_live_pod("Diverging")
    layer, reached = _layer(app), []
    inner = layer.wsgi_app
    monkeypatch.setattr(layer, "wsgi_app", lambda environ, start: reached.append(1) or inner(environ, start))
    body = (b'{"progressPct": 50, "message": "diverged", "seq": %d, "metrics": {"loss": NaN, "lr": 0.001, '
            b'"grad": Infinity, "big": 1.7976931348623157e308, "huge": 1' + b"0" * 400 + b"}}")
    headers = {"Authorization": f"Bearer {live.secret}", "Content-Type": "application/json"}
    assert client.post("/api/progress", data=body % 1, headers=headers).status_code == 200
    assert reached == []  # the lean layer answered it
    monkeypatch.setattr(lean_ingest.lean_reads, "available", lambda: False)
    assert client.post("/api/progress", data=body % 2, headers=headers).status_code == 200
    assert reached == [1]  # the view answered this one
    with app.app_context():
        stored = [p.metrics for p in db.session.scalars(sa.select(PodProgressPost).where(
            PodProgressPost.pod_id == live.id).order_by(PodProgressPost.seq))]
    assert stored == [{"loss": None, "lr": 0.001, "grad": None, "big": None, "huge": None}] * 2


@pytest.mark.parametrize("value", ['"NaN"', "true", "[1]"])
def test_a_progress_metric_that_is_not_a_number_is_refused(app, client, make_live_pod, value):
    """A 400 naming the metric, nothing stored."""
    live = make_live_pod("Not numbers")
    answer = client.post("/api/progress", data=('{"progressPct": 5, "metrics": {"loss": %s}}' % value).encode(),
                         headers={"Authorization": f"Bearer {live.secret}", "Content-Type": "application/json"})
    assert answer.status_code == 400 and "Metric 'loss' must be a number" in answer.get_json()["message"]
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count()).select_from(PodProgressPost)) == 0


# --- the error page after a failed statement ----------------------------------------------------

def test_the_error_page_survives_an_aborted_transaction(app, owner):
    """A statement fails (here a division by zero; before, avg() overflowing) and PostgreSQL
    refuses the rest of the transaction: the error page rolls back first, so the signed-in
    owner gets Sagan's 500 page with its header, not Werkzeug's bare one."""
    broken = create_app(TestConfig)

    def fails():
        db.session.execute(sa.text("SELECT 1 / 0"))
        return "unreachable"

    broken.add_url_rule("/_test/aborted", "aborted", access.public(fails))
    try:
        browser = broken.test_client()
        page = browser.get("/login")
        browser.post("/login", data={"email": OWNER_EMAIL, "password": OWNER_PASSWORD,
                                     "csrf_token": csrf_from(page.text)})
        response = browser.get("/_test/aborted")
        assert response.status_code == 500
        assert "Something went wrong on our side" in response.text and "Your turn (0)" in response.text
        assert browser.get("/").status_code == 200  # the connection went back to the pool clean
    finally:
        with broken.app_context():
            db.session.remove()
            db.engine.dispose()


# --- SQLite, the embedded default ---------------------------------------------------------------

@pytest.fixture
def lite(tmp_path):
    """A Sagan app on a fresh, migrated SQLite file."""
    app = _scratch_app(f"sqlite:///{tmp_path / 'sagan.db'}")
    with app.app_context():
        flask_migrate.upgrade(directory=MIGRATIONS)
    yield app
    with app.app_context():
        db.session.remove()
        db.engine.dispose()


def test_sqlite_extreme_values_chart_as_strict_json_for_owner_and_mentor(lite):
    """On SQLite the largest doubles summed to Infinity, which went out as a bare `Infinity`
    (not JSON) to the owner's chart and the mentor's; now both answer strict JSON, and the
    pages render."""
    from services.core.auth import create_owner
    with lite.app_context():
        create_owner(OWNER_EMAIL, OWNER_PASSWORD)
        number, pods = _experiment_with_pods("Attacked on SQLite")
    client = lite.test_client()
    _attack(client, pods)
    page = client.get("/login")
    client.post("/login", data={"email": OWNER_EMAIL, "password": OWNER_PASSWORD,
                                "csrf_token": csrf_from(page.text)})
    data = client.get(f"/experiments/{number}/metrics/data?name=loss")
    assert data.status_code == 200
    for line in strict_json(data.get_data(as_text=True))["series"]:
        assert line["y"][:3] == [None, 0.0, 0.5] and line["non_finite"] == [3, 0, 0, 0]
    owner_page = client.get(f"/experiments/{number}")
    assert owner_page.status_code == 200 and "latest 0 (runs -1.000e+300–1.000e+300)" in owner_page.text
    with lite.app_context():
        token = _share_promoted(number)
    mentor = lite.test_client()
    assert mentor.get(f"/s/{token}").status_code == 200
    shared = mentor.get(f"/s/{token}/metrics?name=loss")
    assert shared.status_code == 200 and len(strict_json(shared.get_data(as_text=True))["series"]) == 2


def test_sqlite_downsampling_and_merging_keep_non_finite_points(lite):
    """The portable path: a NaN-only batch, then finite points; a downsampled series of huge
    values averages without overflow; a progress post keeps NaN as null."""
    with lite.app_context():
        number, [(pod_id, secret), (_, other)] = _experiment_with_pods("Portable")
    client = lite.test_client()
    assert post_batch(client, secret, b'{"seq": 1, "points": [{"step": 5, "name": "loss", "value": NaN}]}'
                      ).get_json()["non_finite"] == 1
    assert post_batch(client, secret, {"seq": 2, "points": [{"step": 0, "name": "loss", "value": 3.0},
                                                            {"step": 1, "name": "loss", "value": -2.0}]}
                      ).status_code == 200
    values = [BIG / 2, 1e300, -1e300]  # BIG / 2 is past the limit: non-finite
    for seq in range(3):
        points = [{"step": seq * 1000 + i, "name": "big", "value": values[(seq * 1000 + i) % 3]} for i in range(1000)]
        assert post_batch(client, other, {"seq": seq, "points": points}).status_code == 200
    progress = client.post("/api/progress", data=b'{"progressPct": 9, "metrics": {"loss": NaN, "lr": 0.1}}',
                           headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"})
    assert progress.status_code == 200
    with lite.app_context():
        series = db.session.scalars(sa.select(MetricSeries).where(MetricSeries.pod_id == pod_id)).one()
        assert (series.points, series.last_value, series.min_value, series.max_value) == (3, None, -2.0, 3.0)
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == number))
        loss = metrics.chart_data(experiment, "loss")["series"][0]
        assert (loss["y"], loss["non_finite"]) == ([3.0, -2.0, None], [0, 0, 1])
        big = metrics.chart_data(experiment, "big")["series"][0]
        assert big["downsampled"] and (big["y"][0], big["max"][0], big["non_finite"][0]) == (0.0, 1e300, 1)
        assert db.session.scalar(sa.select(PodProgressPost.metrics)) == {"loss": None, "lr": 0.1}
