"""POST /api/metrics: batches of scalar points with the pod's token — idempotency per (pod,
seq), the series summary, every bad form — and the helper that training scripts import."""
from __future__ import annotations

import io
import math
import sys
import threading
import uuid
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import sqlalchemy as sa

from models import Experiment, MetricChunk, MetricSeries, Pod, db
from services.core import clock
from services.dispatch import metrics, tokens
from services.workflow import runs

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
import sagan_metrics  # noqa: E402


def _make_pod(app, experiment_id, index: int = 0) -> tuple[uuid.UUID, str]:
    with app.app_context():
        run = runs.create_run(kind="apply", agent="bench", request="d", scope_id=experiment_id, status="waiting")
        secret, digest = tokens.new_token()
        row = Pod(id=uuid.uuid4(), agent_run_id=run.id, experiment_id=experiment_id, account="local",
                  name=f"sagan-metrics-{uuid.uuid4().hex[:8]}", run_index=index, status="running",
                  progress_token_hash=digest)
        db.session.add(row)
        db.session.commit()
        return row.id, secret


@pytest.fixture
def pods(app, make_experiment):
    """Two running pods of one experiment: [(pod id, secret)] and the experiment number."""
    number = make_experiment("Metrics", status="running")
    with app.app_context():
        experiment_id = db.session.scalar(sa.select(Experiment.id).where(Experiment.number == number))
    return [_make_pod(app, experiment_id, 0), _make_pod(app, experiment_id, 1)], number


def post(client, secret, body=None, **kwargs):
    return client.post("/api/metrics", headers={"Authorization": f"Bearer {secret}"}, json=body, **kwargs)


def points(n, name="loss", start=0):
    return [{"step": start + i, "name": name, "value": 1.0 / (1 + start + i)} for i in range(n)]


def series_of(pod_id, name) -> MetricSeries:
    """A pod's series by name (its key is a bigint id since 0011_metric_chunks)."""
    return db.session.scalars(sa.select(MetricSeries).where(MetricSeries.pod_id == pod_id,
                                                            MetricSeries.name == name)).one()


def stored_points(pod_id=None) -> list[tuple]:
    """Every stored point as (pod id, name, step, value, wall time), read out of the chunks."""
    query = sa.select(MetricSeries.pod_id, MetricSeries.name, MetricChunk.steps, MetricChunk.point_values,
                      MetricChunk.wall_times).join(MetricSeries, MetricSeries.id == MetricChunk.series_id)
    if pod_id is not None:
        query = query.where(MetricSeries.pod_id == pod_id)
    out = []
    for owner, name, steps, values, walls in db.session.execute(query):
        assert len(steps) == len(values) and (walls is None or len(walls) == len(steps))
        out.extend((owner, name, step, value, walls[i] if walls else None)
                   for i, (step, value) in enumerate(zip(steps, values)))
    return out


def count_points(app) -> int:
    with app.app_context():
        return len(stored_points())


def test_a_batch_is_stored_with_its_series_summary(app, client, pods):
    """1,000 points of two metrics in one request: every point stored, one summary per name."""
    [(pod_id, secret), _], _ = pods
    batch = points(500) + [{"step": i, "name": "val/accuracy [%]", "value": 50 + i / 10, "wall_time": 1.7e9 + i}
                           for i in range(500)]
    response = post(client, secret, {"seq": 1, "points": batch})
    assert response.status_code == 200
    assert response.get_json() == {"ok": True, "points": 1000, "duplicate": False}
    with app.app_context():
        assert len(stored_points(pod_id)) == 1000
        loss = series_of(pod_id, "loss")
        assert (loss.points, loss.first_step, loss.last_step) == (500, 0, 499)
        assert loss.last_value == pytest.approx(1 / 500) and loss.max_value == 1.0
        accuracy = series_of(pod_id, "val/accuracy [%]")
        assert accuracy.min_value == 50 and accuracy.last_value == pytest.approx(99.9)
        [wall] = [p[4] for p in stored_points(pod_id) if p[1] == "val/accuracy [%]" and p[2] == 3]
        assert wall == 1.7e9 + 3


def test_a_repeated_seq_is_stored_once_not_doubled(app, client, pods):
    """The same (pod, seq) three times stores one batch and counts it once in the summary;
    the same seq from another pod is that pod's own batch."""
    [(pod_id, secret), (other_id, other_secret)], _ = pods
    for _ in range(3):
        assert post(client, secret, {"seq": 7, "points": points(10)}).status_code == 200
    again = post(client, secret, {"seq": 7, "points": points(10)}).get_json()
    assert again == {"ok": True, "points": 0, "duplicate": True}
    assert post(client, other_secret, {"seq": 7, "points": points(10)}).get_json()["duplicate"] is False
    assert count_points(app) == 20
    with app.app_context():
        assert series_of(pod_id, "loss").points == 10
        assert series_of(other_id, "loss").points == 10


def test_batches_out_of_order_keep_the_latest_step_as_latest_value(app, client, pods):
    """A late batch with older steps widens the range but does not replace the latest value."""
    [(pod_id, secret), _], _ = pods
    post(client, secret, {"seq": 2, "points": points(10, start=100)})
    post(client, secret, {"seq": 1, "points": points(10, start=0)})
    with app.app_context():
        series = series_of(pod_id, "loss")
        assert (series.points, series.first_step, series.last_step) == (20, 0, 109)
        assert series.last_value == pytest.approx(1 / 110)


@pytest.mark.parametrize("body,status,needle", [
    ({"points": points(1)}, 400, "seq"),
    ({"seq": -1, "points": points(1)}, 400, "seq"),
    ({"seq": "1", "points": points(1)}, 400, "seq"),
    ({"seq": True, "points": points(1)}, 400, "seq"),
    ({"seq": 1}, 400, "points"),
    ({"seq": 1, "points": []}, 400, "points"),
    ({"seq": 1, "points": {"loss": 1}}, 400, "points"),
    ({"seq": 1, "points": [[0, "loss", 1.0]]}, 400, "points[0]"),
    ({"seq": 1, "points": points(1001)}, 413, "1,001"),
    ({"seq": 1, "points": points(3) + [{"step": 3, "name": "loss", "value": "low"}]}, 400, "points[3].value"),
    ({"seq": 1, "points": [{"step": 0, "name": "loss", "value": True}]}, 400, "points[0].value"),
    ({"seq": 1, "points": [{"step": 0, "name": "loss", "value": None}]}, 400, "points[0].value"),
    ({"seq": 1, "points": [{"step": 0, "name": "loss"}]}, 400, "points[0].value"),
    ({"seq": 1, "points": [{"step": 1.5, "name": "loss", "value": 1}]}, 400, "points[0].step"),
    ({"seq": 1, "points": [{"step": -1, "name": "loss", "value": 1}]}, 400, "points[0].step"),
    ({"seq": 1, "points": [{"name": "loss", "value": 1}]}, 400, "points[0].step"),
    ({"seq": 1, "points": [{"step": 0, "name": "", "value": 1}]}, 400, "points[0].name"),
    ({"seq": 1, "points": [{"step": 0, "name": "x" * 121, "value": 1}]}, 400, "points[0].name"),
    ({"seq": 1, "points": [{"step": 0, "name": "a\nb", "value": 1}]}, 400, "points[0].name"),
    ({"seq": 1, "points": [{"step": 0, "name": 5, "value": 1}]}, 400, "points[0].name"),
    ({"seq": 1, "points": [{"step": 0, "name": "loss", "value": 1, "wall_time": "now"}]}, 400, "wall_time"),
    ({"seq": 1, "points": [{"step": 0, "name": "loss", "value": 1, "colour": "red"}]}, 400, "colour"),
    ({"seq": 1, "points": [{"step": 0, "name": f"m{i}", "value": 1} for i in range(51)]}, 400, "51 metric names"),
    ({"seq": 1, "points": points(1), "extra": 1}, 400, "extra"),
    ([1, 2, 3], 400, "JSON object"),
])
def test_bad_batches_are_refused_and_change_nothing(app, client, pods, body, status, needle):
    """Each malformed batch gets a clear error naming what is wrong; no point is stored, even
    the good points before the bad one."""
    [(_, secret), _], _ = pods
    response = post(client, secret, body)
    assert response.status_code == status, response.get_data(as_text=True)
    assert needle in response.get_json()["message"]
    assert count_points(app) == 0


@pytest.mark.parametrize("raw", [b'{"seq": 1, "points": [{"step": 0, "name": "loss", "value": "NaN"}]}',
                                 b'{"seq": 1, "points": [{"step": 0, "name": "loss", "value": null}]}',
                                 b'{"seq": 1, "points": [{"step": 0, "name": "loss", "value": NaN, '
                                 b'"wall_time": Infinity}]}',
                                 b"not json"])
def test_text_values_bad_wall_times_and_broken_json_are_400(app, client, pods, raw):
    """A value that is not a number, a wall time that is not finite, a body that is not
    JSON: refused, nothing stored (NaN and Infinity values are kept as non-finite points:
    tests/integration/test_metric_extremes.py)."""
    [(_, secret), _], _ = pods
    response = client.post("/api/metrics", data=raw, headers={"Authorization": f"Bearer {secret}",
                                                               "Content-Type": "application/json"})
    assert response.status_code == 400
    assert count_points(app) == 0


def test_wrong_and_missing_tokens_are_401(app, client, pods):
    """No token, an unknown one, or an API-style token: 401, nothing stored."""
    for headers in ({}, {"Authorization": "Bearer spt_" + "0" * 43}, {"Authorization": "Basic abc"}):
        response = client.post("/api/metrics", json={"seq": 1, "points": points(2)}, headers=headers)
        assert response.status_code == 401 and response.get_json()["error"] == "invalid_pod_token"
    assert count_points(app) == 0


def test_a_token_stores_points_only_for_its_own_pod(app, client, pods):
    """A pod's token writes its own pod's series: nothing in the body can name another pod."""
    [(pod_id, secret), (other_id, _)], _ = pods
    assert post(client, secret, {"seq": 1, "points": points(3), "pod_id": str(other_id)}).status_code == 400
    post(client, secret, {"seq": 1, "points": points(3)})
    with app.app_context():
        owners = {p[0] for p in stored_points()}
    assert owners == {pod_id}


def test_a_stopped_pods_token_stops_working(app, client, pods):
    """A pod whose token was cleared (it stopped long ago) cannot post metrics."""
    [(pod_id, secret), _], _ = pods
    with app.app_context():
        db.session.get(Pod, pod_id).progress_token_hash = None
        db.session.commit()
    assert post(client, secret, {"seq": 1, "points": points(2)}).status_code == 401


def test_secret_looking_metric_names_are_redacted(app, client, pods):
    """A metric name is stored and shown, so a key pasted into one is redacted first."""
    [(_, secret), _], _ = pods
    leaked = "sk-ant-api03-" + "A" * 40
    post(client, secret, {"seq": 1, "points": [{"step": 0, "name": leaked, "value": 1.0}]})
    with app.app_context():
        [stored] = {p[1] for p in stored_points()}
    assert "A" * 40 not in stored


def test_the_helper_is_served_to_pods_only(app, client, pods):
    """The bootstrap fetches the helper with the pod's token; without one it is 401."""
    [(_, secret), _], _ = pods
    served = client.get("/api/metrics/helper.py", headers={"Authorization": f"Bearer {secret}"})
    assert served.status_code == 200 and b"def log(" in served.data
    assert client.get("/api/metrics/helper.py").status_code == 401


class _Receiver(ThreadingHTTPServer):
    """Forwards each POST to the Flask test client, answering the first `fail_first` with 503
    (a server restarting: the helper must retry the same batch, same seq)."""

    def __init__(self, client, fail_first: int = 0):
        self.client, self.fail_first, self.seen = client, fail_first, []
        super().__init__(("127.0.0.1", 0), _Forward)


class _Forward(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - the http.server hook's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.seen.append(body)
        if self.server.fail_first > 0:
            self.server.fail_first -= 1
            status, data = 503, b'{"error": "unavailable"}'
        else:
            answer = self.server.client.post("/api/metrics", data=body, headers={
                "Authorization": self.headers["Authorization"], "Content-Type": "application/json"})
            status, data = answer.status_code, answer.data
        self.send_response(status)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver(client):
    servers = []

    def start(fail_first=0):
        server = _Receiver(client, fail_first)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return server, f"http://127.0.0.1:{server.server_address[1]}/api/metrics"
    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


def test_the_helper_batches_retries_and_sends_non_finite_values(app, pods, receiver):
    """2,500 logged points go as three batches (1,000 at most); a 503 is retried with the
    same seq, so nothing is lost or doubled; NaN and infinity are sent and kept as marked
    points (they were skipped before: a diverged loss left no trace); text is skipped with a
    warning."""
    [(pod_id, secret), _], number = pods
    server, url = receiver(fail_first=1)
    out = io.StringIO()
    helper = sagan_metrics.Metrics(url, secret, flush_seconds=3600, retry_seconds=0, out=out)
    for step in range(1250):
        helper.log(step, loss=1 / (step + 1), acc=step / 1250)
    helper.log(1250, loss=math.nan, acc=math.inf)
    helper.log(1251, loss="diverged")
    assert helper.flush() is True
    assert "not a number; skipped" in out.getvalue() and "not finite" not in out.getvalue()
    assert len(server.seen) == 4 and server.seen[0] == server.seen[1]  # the retry is the same batch
    with app.app_context():
        assert series_of(pod_id, "loss").points == 1251 and series_of(pod_id, "acc").points == 1251
        assert series_of(pod_id, "loss").last_value is None
        chart = metrics.chart_data(db.session.scalar(sa.select(Experiment).where(Experiment.number == number)),
                                   "loss", target=5000)
        assert chart["series"][0]["y"][-1] is None and chart["series"][0]["non_finite"][-1] == 1


def test_the_helper_reports_a_refusal_without_raising(app, pods, receiver):
    """A 4xx (a wrong token) is reported on stderr once, not retried, and never raises."""
    _, url = receiver()
    out = io.StringIO()
    helper = sagan_metrics.Metrics(url, "spt_wrong", retry_seconds=0, out=out)
    helper.log(0, loss=1.0)
    assert helper.flush() is False
    assert "refused (401)" in out.getvalue()


def test_the_helper_finds_the_metrics_url_from_the_progress_url(monkeypatch):
    """Pods are told SAGAN_PROGRESS_URL; the metrics endpoint is its sibling."""
    monkeypatch.delenv("SAGAN_METRICS_URL", raising=False)
    monkeypatch.setenv("SAGAN_PROGRESS_URL", "https://sagan.example/api/progress")
    assert sagan_metrics.Metrics(token="t").url == "https://sagan.example/api/metrics"


def test_the_portable_path_on_sqlite_stores_once_and_charts(tmp_path):
    """The embedded default (SQLite): the same batch semantics — stored once per (pod, seq),
    the summary merged, the chart data downsampled — through the statement-by-statement path."""
    import flask_migrate

    import config as sagan_config
    from app import create_app
    from services.core.actors import Actor
    from services.dispatch import metrics
    from services.workflow import experiments

    class LiteConfig(sagan_config.TestConfig):
        SQLALCHEMY_DATABASE_URI = f"sqlite:///{tmp_path / 'sagan.db'}"
        SQLALCHEMY_ENGINE_OPTIONS: dict = {}
    lite = create_app(LiteConfig)
    with lite.app_context():
        flask_migrate.upgrade(directory=str(Path(__file__).resolve().parents[2] / "migrations"))
        experiment = experiments.create_experiment({"title": "Lite"}, Actor("owner"))
        db.session.flush()
        pod = Pod(id=uuid.uuid4(), experiment_id=experiment.id, account="local", name="lite-0", status="running")
        db.session.add(pod)
        db.session.flush()
        for seq, start in ((1, 1000), (2, 0), (2, 0)):
            batch = metrics.parse_batch({"seq": seq, "points": points(1000, start=start)})
            metrics.record_batch(pod, batch)
        db.session.commit()
        series = series_of(pod.id, "loss")
        assert (series.points, series.first_step, series.last_step) == (2000, 0, 1999)
        assert series.last_value == pytest.approx(1 / 2000) and series.max_value == 1.0
        chart = metrics.chart_data(experiment, "loss")
        line = chart["series"][0]
        assert line["downsampled"] and len(line["x"]) == 1000 and line["max"][0] == 1.0
        db.session.remove()
        db.engine.dispose()


# --- the token checked inside the write (one statement per batch) -----------------------

def test_a_bad_token_is_401_before_a_bad_or_oversized_batch(app, client, pods):
    """The write statement checks the token, so a batch refused before it (a bad point, 1,001
    points) still answers 401 for an unknown token, not the 400 or 413 a pod would get."""
    unknown = "spt_" + "y" * 43
    for body in ({"seq": 1, "points": points(1001)}, {"seq": -1, "points": points(1)}, [1]):
        response = post(client, unknown, body)
        assert response.status_code == 401 and response.get_json()["error"] == "invalid_pod_token"
    [(_, secret), _], _ = pods
    assert post(client, secret, {"seq": 1, "points": points(1001)}).status_code == 413
    assert count_points(app) == 0


def test_a_stopped_pods_token_works_through_its_grace_period_only(app, client, pods):
    """The validity rule inside the statement is pod_for_token's: a stopped pod posts for
    POD_TOKEN_GRACE_SECONDS after it stopped, then gets 401."""
    [(pod_id, secret), _], _ = pods
    with app.app_context():
        row = db.session.get(Pod, pod_id)
        row.status, row.stopped_at = "stopped", clock.utcnow()
        db.session.commit()
    assert post(client, secret, {"seq": 1, "points": points(2)}).status_code == 200
    clock.advance(timedelta(seconds=app.config["POD_TOKEN_GRACE_SECONDS"] + 1))
    late = post(client, secret, {"seq": 2, "points": points(2, start=2)})
    assert late.status_code == 401 and late.get_json()["error"] == "invalid_pod_token"
    assert count_points(app) == 2


@pytest.mark.parametrize("raw, content_type", [
    (b'{"seq": 1, "points": [{"step": 0, "name": "loss", "value": 1, "wall_time": 1' + b"0" * 400 + b"}]}",
     "application/json"),
    (b"[" * 100_000 + b"]" * 100_000, "application/json"),
    (b'{"seq": 1, "points": [{"step": 0, "name": "loss", "value": 1}]}', "text/plain"),
    (b'\xff\xfe{"seq": 1}', "application/json"),
])
def test_integers_too_big_for_a_float_deep_nesting_and_non_json_are_400(app, client, pods, raw, content_type):
    """A 400 with a message, never a 500: a wall time that overflows a float, JSON nested past
    the decoder's recursion limit, a body not sent as JSON, bytes that are not UTF-8."""
    [(_, secret), _], _ = pods
    response = client.post("/api/metrics", data=raw, headers={"Authorization": f"Bearer {secret}",
                                                               "Content-Type": content_type})
    assert response.status_code == 400, response.get_data(as_text=True)[:200]
    assert response.get_json()["message"]
    assert count_points(app) == 0


def test_a_batch_is_chunked_per_metric_in_posting_order(app, client, pods):
    """The points of each metric of a batch are one chunk, in the order they were posted
    (steps out of order stay so), with wall times only where the batch had them."""
    [(pod_id, secret), _], _ = pods
    batch = [{"step": 5, "name": "loss", "value": 0.5}, {"step": 1, "name": "acc", "value": 0.1, "wall_time": 7.0},
             {"step": 3, "name": "loss", "value": 0.3}, {"step": 2, "name": "acc", "value": 0.2}]
    assert post(client, secret, {"seq": 4, "points": batch}).status_code == 200
    with app.app_context():
        chunks = {name: (seq, steps, values, walls) for name, seq, steps, values, walls in db.session.execute(
            sa.select(MetricSeries.name, MetricChunk.seq, MetricChunk.steps, MetricChunk.point_values,
                      MetricChunk.wall_times).join(MetricSeries, MetricSeries.id == MetricChunk.series_id))}
        assert chunks == {"loss": (4, [5, 3], [0.5, 0.3], None), "acc": (4, [1, 2], [0.1, 0.2], [7.0, None])}
        loss = series_of(pod_id, "loss")
        assert (loss.first_step, loss.last_step, loss.last_value) == (3, 5, 0.5)
