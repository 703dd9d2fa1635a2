"""A pod's log for agents and the owner: `read_pod_logs` reads RunPod's v2
logs stream (the loopback fake serves it as server-sent events and holds a running pod's
stream open, like the real one), the local backend's output.log, and the uploaded
`sagan-logs/<pod>.log` artifact once the pod is gone; redacted and capped. The pod card's
Logs view shows the same text."""
from __future__ import annotations

import hashlib
import time
import uuid

from models import Artifact, Pod, db
from services.dispatch import pod_logs, progress
from services.dispatch.backends.runpod import LOG_IDLE_SECONDS
from services.workflow import experiments
from tests.integration.code_fixtures import call, tool_context

SECRET_LINE = "export KEY=sk-ant-api03-LEAKEDLEAKEDLEAKED0000"


def add_pod(number: int, *, account: str, provider_pod_id: str | None, status: str = "running",
            suffix: str = "a") -> Pod:
    experiment = experiments.get_experiment(number)
    pod = Pod(id=uuid.uuid4(), experiment_id=experiment.id, account=account,
              name=f"sagan-{number}-{suffix}-0-1", status=status, provider_pod_id=provider_pod_id)
    db.session.add(pod)
    db.session.commit()
    return pod


def add_log_artifact(pod: Pod, text: str) -> None:
    content = text.encode()
    db.session.add(Artifact(pod_id=pod.id, experiment_id=pod.experiment_id, name=f"sagan-logs/{pod.name}.log",
                            content_type="text/plain", size=len(content), sha256=hashlib.sha256(content).hexdigest(),
                            content=content))
    db.session.commit()


def test_runpod_log_stream_tail_and_since_redacted(app, make_experiment, fake_runpod):
    """Does the tool read RunPod's SSE stream of a running pod (held open after the backfill),
    both its sources each line labelled, honour tail and since, stamp each line with its time,
    and redact secrets?"""
    number = make_experiment("Logs from RunPod", status="running")
    provider_id = fake_runpod.add_pod(f"sagan-{number}-a-0-1", status="RUNNING")
    fake_runpod.add_log(provider_id, "booting", source="system")
    fake_runpod.add_log(provider_id, "epoch 1 loss 2.0", SECRET_LINE, "epoch 2 loss 1.5")
    with app.app_context():
        add_pod(number, account="team", provider_pod_id=provider_id)
        ctx = tool_context(number, "experiment-orchestrator")
        started = time.monotonic()
        result = call(ctx, "read_pod_logs", pod=f"sagan-{number}-a-0-1", tail=2)
        assert not result.is_error, result.content
        # Two lines asked for, two lines came: the reader stopped without waiting for the stream to end.
        assert time.monotonic() - started < fake_runpod.log_hold_seconds
        assert "RunPod's log stream: 2 line(s)" in result.content
        assert "[container] epoch 2 loss 1.5" in result.content and "epoch 1 loss" not in result.content
        assert "LEAKEDLEAKED" not in result.content and "[REDACTED]" in result.content
        assert "booting" not in result.content  # the tail is the last lines of both sources

        whole = call(ctx, "read_pod_logs", pod=f"sagan-{number}-a-0-1")
        assert "4 line(s)" in whole.content and "[container] epoch 1 loss 2.0" in whole.content
        system_ts, first_ts = (entry[0] for entry in fake_runpod.pods[provider_id].log[:2])
        assert f"{system_ts} [system] booting\n{first_ts} [container] epoch 1 loss 2.0" in whole.content

        after = call(ctx, "read_pod_logs", pod=f"sagan-{number}-a-0-1", since=first_ts)
        assert "2 line(s)" in after.content and "epoch 1 loss" not in after.content and "booting" not in after.content
    sent = [r for r in fake_runpod.requests if r.path.endswith("/logs")]
    assert sent[0].query == {"tail": "2"}  # no source: RunPod sends the container's lines and the host's
    assert sent[-1].query == {"since": first_ts}


def test_a_pod_that_never_started_its_container_shows_the_hosts_lines(app, make_experiment, fake_runpod,
                                                                      monkeypatch, client, owner):
    """A pod whose image could not be pulled never starts its container: RunPod has only its host's
    system lines. Do read_pod_logs and the pod card's Logs view show those lines, labelled, saying
    the container printed nothing? (test_dispatch follows the same pod through a failed dispatch.)"""
    fake_runpod.starting_seconds = 10 ** 6  # stuck in STARTING: the image never comes
    number = make_experiment("An image that is not there", status="running")
    provider_id = fake_runpod.add_pod(f"sagan-{number}-a-0-1")
    fake_runpod.advance(15)
    fake_runpod.add_log(provider_id, "Pulling image registry.example/broken:latest", source="system")
    fake_runpod.add_log(provider_id, "error pulling image: manifest unknown", source="system")
    with app.app_context():
        pod = add_pod(number, account="team", provider_pod_id=provider_id, status="stopped")
        result = call(tool_context(number, "experiment-orchestrator"), "read_pod_logs", pod=pod.name)
        pod_id = pod.id
    assert not result.is_error and "RunPod's log stream: 2 line(s)" in result.content
    assert "[system] error pulling image: manifest unknown" in result.content
    assert "Only the host's system lines: the container has printed nothing" in result.content
    view = client.get(f"/pods/{pod_id}/logs", headers={"HX-Request": "true"})
    assert view.status_code == 200 and "[system] error pulling image: manifest unknown" in view.text
    assert "each labelled [container] or [system]" in view.text


def test_runpod_stream_that_never_ends_is_read_until_idle(app, make_experiment, fake_runpod):
    """A running pod's stream stays open with keep-alive comments: is the backfill returned once
    no data came for the idle window, rather than the read hanging until the stream closes?"""
    fake_runpod.log_hold_seconds = 20
    number = make_experiment("Logs that keep streaming", status="running")
    provider_id = fake_runpod.add_pod(f"sagan-{number}-a-0-1", status="RUNNING")
    fake_runpod.add_log(provider_id, "only line")
    with app.app_context():
        pod = add_pod(number, account="team", provider_pod_id=provider_id)
        started = time.monotonic()
        log = pod_logs.read_pod_logs(pod, tail=100)
        waited = time.monotonic() - started
    assert log.source == "runpod" and log.lines == 1 and "only line" in log.text
    assert LOG_IDLE_SECONDS <= waited < 10


def test_terminated_pod_falls_back_to_the_uploaded_log(app, make_experiment, fake_runpod):
    """Once RunPod no longer has the pod, is the uploaded log artifact read, tail applied and redacted?"""
    number = make_experiment("Logs after the pod is gone", status="running")
    provider_id = fake_runpod.add_pod(f"sagan-{number}-a-0-1", status="TERMINATED")
    with app.app_context():
        pod = add_pod(number, account="team", provider_pod_id=provider_id, status="exited")
        add_log_artifact(pod, "\n".join([f"step {i}" for i in range(10)] + [SECRET_LINE,
                                         "Traceback (most recent call last):", "ValueError: bad shape"]))
        ctx = tool_context(number, "analyzer")
        result = call(ctx, "read_pod_logs", pod=pod.name, tail=3)
    assert not result.is_error
    assert "the log the pod uploaded" in result.content and "ValueError: bad shape" in result.content
    assert "step 9" not in result.content and "LEAKEDLEAKED" not in result.content


def test_an_uploaded_log_still_being_redacted_is_said_so_and_not_shown(app, make_experiment, fake_runpod):
    """A 1 MB log (over what is redacted inside the upload) waits for the artifacts job: is it
    said to be still processing, with none of its text (its secret included) shown?"""
    number = make_experiment("Log still processing", status="running")
    provider_id = fake_runpod.add_pod(f"sagan-{number}-a-0-1", status="TERMINATED")
    with app.app_context():
        pod = add_pod(number, account="team", provider_pod_id=provider_id, status="exited")
        progress.store_artifact(pod, f"sagan-logs/{pod.name}.log",
                                (SECRET_LINE + "\n" + "step\n" * 250_000).encode(), "text/plain")
        db.session.commit()
        result = call(tool_context(number, "analyzer"), "read_pod_logs", pod=pod.name, tail=3)
    assert "The log the pod uploaded is still being redacted" in result.content
    assert "LEAKEDLEAKED" not in result.content and "step" not in result.content


def test_local_pod_log_file_and_missing_log(app, make_experiment, monkeypatch, tmp_path):
    """Does a local pod's output.log come back (since is said to be ignored there), and a pod with
    no log anywhere get a sentence saying so?"""
    monkeypatch.setitem(app.config, "SAGAN_LOCAL_PODS_DIR", tmp_path)
    number = make_experiment("Local logs", status="running")
    name = f"sagan-{number}-a-0-1"
    (tmp_path / name).mkdir()
    (tmp_path / name / "output.log").write_text("cloning\ntraining\nTraceback: boom\n")
    with app.app_context():
        add_pod(number, account="local", provider_pod_id=name)
        add_pod(number, account="local", provider_pod_id=f"sagan-{number}-b-0-1", suffix="b", status="exited")
        ctx = tool_context(number, "experiment-orchestrator")
        local = call(ctx, "read_pod_logs", pod=name, since="2026-12-01T09:00:00Z")
        missing = call(ctx, "read_pod_logs", pod=f"sagan-{number}-b-0-1")
    assert "the local pod's output.log: 3 line(s)" in local.content and "Traceback: boom" in local.content
    assert "since cannot narrow it" in local.content
    assert not missing.is_error and "No log is available" in missing.content


def test_log_is_capped(app, make_experiment, monkeypatch, tmp_path):
    """Is a huge log cut to MAX_BYTES, keeping its end?"""
    monkeypatch.setitem(app.config, "SAGAN_LOCAL_PODS_DIR", tmp_path)
    number = make_experiment("A chatty pod", status="running")
    name = f"sagan-{number}-a-0-1"
    (tmp_path / name).mkdir()
    (tmp_path / name / "output.log").write_text("".join(f"line {i} " + "x" * 200 + "\n" for i in range(4000))
                                                + "the end\n")
    with app.app_context():
        pod = add_pod(number, account="local", provider_pod_id=name)
        log = pod_logs.read_pod_logs(pod, tail=5000)
    assert log.truncated and len(log.text.encode()) <= pod_logs.MAX_BYTES
    assert log.text.endswith("the end") and "cut to the last" in log.render()


def test_bad_input_is_a_clear_tool_error(app, make_experiment, fake_runpod):
    """Another experiment's pod, an unknown pod, tail out of range, a garbage since, tail with
    since: a clear tool error each, and nothing is asked of the provider."""
    mine = make_experiment("Mine", status="running")
    other = make_experiment("Someone else's", status="running")
    with app.app_context():
        foreign = add_pod(other, account="team", provider_pod_id="abc123")
        own = add_pod(mine, account="team", provider_pod_id="def456")
        ctx = tool_context(mine, "experiment-orchestrator")
        cases = [({"pod": foreign.name}, "No pod"), ({"pod": str(foreign.id)}, "No pod"),
                 ({"pod": "  "}, "Name the pod"), ({"pod": own.name, "tail": 0}, "tail"),
                 ({"pod": own.name, "tail": 9999}, "tail"), ({"pod": own.name, "tail": True}, "tail"),
                 ({"pod": own.name, "since": "yesterday"}, "since"),
                 ({"pod": own.name, "since": "2026-12-01T09:00:00"}, "time zone"),
                 ({"pod": own.name, "tail": 5, "since": "2026-12-01T00:00:00Z"}, "not both")]
        for data, words in cases:
            result = call(ctx, "read_pod_logs", **data)
            assert result.is_error and words in result.content, (data, result.content)
            assert "Mine" not in result.content
    assert not [r for r in fake_runpod.requests if r.path.endswith("/logs")]


def test_pod_card_logs_view(app, client, owner, make_experiment, fake_runpod):
    """Does the pod card link to a Logs view showing the same redacted text (page and htmx
    fragment), with a clear 400 for a bad tail?"""
    number = make_experiment("Logs on the page", status="running")
    provider_id = fake_runpod.add_pod(f"sagan-{number}-a-0-1", status="EXITED")
    fake_runpod.add_log(provider_id, "hello from the pod", SECRET_LINE)
    with app.app_context():
        pod_id = add_pod(number, account="team", provider_pod_id=provider_id, status="exited").id
    page = client.get(f"/experiments/{number}")
    assert f"/pods/{pod_id}/logs" in page.text
    logs = client.get(f"/pods/{pod_id}/logs")
    assert logs.status_code == 200 and "hello from the pod" in logs.text
    assert "LEAKEDLEAKED" not in logs.text and "[REDACTED]" in logs.text
    fragment = client.get(f"/pods/{pod_id}/logs", headers={"HX-Request": "true"})
    assert fragment.status_code == 200 and "<html" not in fragment.text and "hello from the pod" in fragment.text
    bad = client.get(f"/pods/{pod_id}/logs?tail=lots")
    assert bad.status_code == 400 and "tail must be a whole number" in bad.text
    assert client.get(f"/pods/{uuid.uuid4()}/logs").status_code == 404
