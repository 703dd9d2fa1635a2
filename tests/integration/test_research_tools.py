"""Earlier experiments and the run's artifacts as evidence, through the
real tool registry: search_experiments, read_experiment, list_artifacts, read_artifact, and
figures embedded in the clean result."""
from __future__ import annotations

import base64
import json
import struct
import uuid
import zlib
from datetime import timedelta

import sqlalchemy as sa

from models import Artifact, Experiment, Pod, PodProgressPost, db
from services.agents import toolbox, toolkit
from services.core.actors import Actor
from services.core.clock import utcnow
from services.dispatch import progress
from services.results import results
from services.workflow import experiments, runs
from tests.integration.code_fixtures import call, tool_context

AGENT = Actor("agent", None, "analyzer")


def use(ctx, tool: str, data: dict) -> toolkit.ToolResult:
    """One tool call as the loop makes it (for inputs named like call()'s own arguments)."""
    result = toolbox.call(ctx, tool, data)
    db.session.commit()
    return result


def png(width: int = 2, height: int = 1) -> bytes:
    """A real (tiny, grey) PNG image."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + b"\x80" * width for _ in range(height))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def add_pod(number: int, suffix: str = "a", metrics: dict | None = None) -> Pod:
    experiment = experiments.get_experiment(number)
    run = runs.create_run(kind="experiment", agent="provisioner", request="d", scope_id=experiment.id,
                          status="waiting")
    pod = Pod(id=uuid.uuid4(), agent_run_id=run.id, experiment_id=experiment.id, account="local",
              name=f"sagan-{number}-{suffix}-0-1", status="running")
    db.session.add(pod)
    db.session.flush()
    if metrics:
        db.session.add(PodProgressPost(pod_id=pod.id, seq=1, progress_pct=50, message="half", metrics={"loss": 9.9},
                                       created_at=utcnow()))
        db.session.add(PodProgressPost(pod_id=pod.id, seq=2, progress_pct=100, message="done", metrics=metrics,
                                       created_at=utcnow() + timedelta(seconds=5)))
    return pod


def test_search_finds_experiments_by_title_hypothesis_result_title_and_tags(app, make_experiment):
    with app.app_context():
        warm = make_experiment("Warmup schedule sweep", hypothesis="Longer warmup stabilises 350M training",
                               tags=["optim"])
        tagged = make_experiment("Batch size study", tags=["warmup-free"])
        other = make_experiment("Tokenizer ablation")
        with_result = make_experiment("Seed variance")
        results.save_clean_result(experiments.get_experiment(with_result), "<p>Results: spread is small.</p>", AGENT,
                                  title="Warmup matters less than seeds (LOW confidence)")
        db.session.commit()
        me = make_experiment("Planning this one")
        ctx = tool_context(me, "experiment-planner")

        found = json.loads(call(ctx, "search_experiments", text="warmup").content)["experiments"]
        numbers = [f["number"] for f in found]
        assert numbers == sorted([warm, tagged, with_result], reverse=True)  # newest first; title, tags, result
        assert other not in numbers and me not in numbers
        assert found[-1]["cite"] == f"#{warm}" and found[-1]["hypothesis"].startswith("Longer warmup")

        both = json.loads(call(ctx, "search_experiments", text="warmup 350M").content)["experiments"]
        assert [f["number"] for f in both] == [warm]  # every word must match
        assert json.loads(call(ctx, "search_experiments", text=f"#{other}").content)["experiments"][0]["number"] == other
        capped = json.loads(call(ctx, "search_experiments", status="proposed", limit=2).content)
        assert len(capped["experiments"]) == 2 and "newest 2" in capped["more"]
        assert "No other experiment matches" in call(ctx, "search_experiments", text="nothing-like-this").content
        assert "100%" not in call(ctx, "search_experiments", text="100%").content  # % is a character, not a wildcard


def test_search_bad_input_is_a_clear_error(app, make_experiment):
    with app.app_context():
        ctx = tool_context(make_experiment("x"), "experiment-planner")
        for data, message in (({}, "Give words to search for"), ({"status": "nope"}, "status must be one of"),
                              ({"text": "x", "limit": "5"}, "limit must be integer"),
                              ({"text": "x", "sql": "1"}, "Unknown input")):
            result = call(ctx, "search_experiments", **data)
            assert result.is_error and message in result.content, result.content


def test_read_experiment_returns_record_plan_result_text_and_latest_metrics(app, make_experiment):
    with app.app_context():
        earlier = make_experiment("Warmup sweep", hypothesis="Warmup helps")
        experiment = experiments.get_experiment(earlier)
        experiment.plan_md = "## Goal\nRun `python train.py --warmup 500`."
        results.save_clean_result(experiment, "<h2>TL;DR</h2><ul><li>Results: loss 2.31 vs 2.35 (#1)</li></ul>"
                                  "<script>x</script>", AGENT, title="Warmup helps a little (LOW confidence)")
        add_pod(earlier, metrics={"loss": 2.31, "tokens": 1_000_000})
        db.session.commit()
        ctx = tool_context(make_experiment("Now"), "analyzer")
        record = json.loads(call(ctx, "read_experiment", number=earlier).content)
        assert record["cite"] == f"#{earlier}" and record["title"].startswith("Warmup helps a little")
        assert "--warmup 500" in record["plan_markdown"]
        assert "Results: loss 2.31 vs 2.35 (#1)" in record["clean_result_text"] and "<" not in record["clean_result_text"]
        assert record["key_metrics"] == {f"sagan-{earlier}-a-0-1": {"loss": 2.31, "tokens": 1_000_000}}


def test_read_experiment_bad_input(app, make_experiment):
    with app.app_context():
        me = make_experiment("Me")
        ctx = tool_context(me, "analyzer")
        for data, message in (({"number": 99999}, "There is no experiment #99999"),
                              ({"number": -1}, "There is no experiment #-1"),
                              ({"number": me}, "this run's own experiment"),
                              ({"number": "1"}, "number must be integer"), ({}, "Missing required input: number")):
            result = call(ctx, "read_experiment", **data)
            assert result.is_error and message in result.content, result.content


def test_list_and_read_artifacts_text_csv_svg_and_images_the_model_can_see(app, make_experiment):
    with app.app_context():
        number = make_experiment("Artifacts")
        pod = add_pod(number)
        progress.store_artifact(pod, "metrics.json", b'{"loss": 2.31, "key": "sk-ant-api03-abcdefghijklmnop"}', None)
        progress.store_artifact(pod, "curve.csv", b"step,loss\n1,3.0\n2,2.5\n", None)
        progress.store_artifact(pod, "figures/loss.png", png(), None)
        progress.store_artifact(pod, "loss.svg", b'<svg xmlns="http://www.w3.org/2000/svg"><script>x</script>'
                                                 b'<circle r="3"/></svg>', None)
        db.session.commit()
        ctx = tool_context(number, "analyzer")

        listing = json.loads(call(ctx, "list_artifacts").content)
        assert [(a["name"], a["type"], a["pod"]) for a in listing] == [
            ("curve.csv", "text/csv", pod.name), ("figures/loss.png", "image/png", pod.name),
            ("loss.svg", "image/svg+xml", pod.name), ("metrics.json", "application/json", pod.name)]

        text = use(ctx, "read_artifact", {"name": "curve.csv"})
        assert "step,loss\n1,3.0" in text.content and not text.images and text.api_content() == text.content
        assert "sk-ant" not in use(ctx, "read_artifact", {"name": "metrics.json"}).content

        figure_id = next(a["id"] for a in listing if a["name"] == "figures/loss.png")
        image = use(ctx, "read_artifact", {"id": figure_id})
        assert not image.is_error and "the image follows" in image.content
        content = image.api_content()  # what the loop sends: text, then a base64 image block
        assert content[0]["type"] == "text"
        assert content[1] == {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                          "data": base64.b64encode(png()).decode()}}

        svg = use(ctx, "read_artifact", {"name": "loss.svg"})
        assert "SVG is not an image type" in svg.content and "<circle" in svg.content and "<script" not in svg.content


def test_another_experiments_artifact_is_a_clear_error_and_shows_nothing(app, make_experiment):
    with app.app_context():
        mine, theirs = make_experiment("Mine"), make_experiment("Theirs")
        secret = progress.store_artifact(add_pod(theirs, "b"), "private.txt", b"their private numbers", None)
        db.session.commit()
        ctx = tool_context(mine, "analyzer")
        for data, message in (({"id": str(secret.id)}, "is not one of"), ({"name": "private.txt"}, "has no artifact"),
                              ({"id": "not-a-uuid"}, "is not an artifact id"), ({}, "Give the artifact's id")):
            result = use(ctx, "read_artifact", data)
            assert result.is_error and message in result.content and "their private" not in result.content
        assert "no artifacts yet" in call(ctx, "list_artifacts").content


def test_the_clean_result_embeds_an_artifact_figure_and_refuses_unknown_ones(app, make_experiment):
    with app.app_context():
        number, theirs = make_experiment("Embeds"), make_experiment("Other")
        pod = add_pod(number)
        progress.store_artifact(pod, "loss.png", png(), None)
        progress.store_artifact(pod, "notes.txt", b"notes", None)
        foreign = progress.store_artifact(add_pod(theirs, "d"), "loss.png", png(3, 1), None)
        db.session.commit()
        ctx = tool_context(number, "analyzer")
        html = '<h2>TL;DR</h2><figure><img src="artifact:loss.png" alt="Loss"></figure>'
        saved = call(ctx, "write_clean_result", html=html)
        assert not saved.is_error, saved.content
        body = db.session.scalar(sa.select(Experiment.body).where(Experiment.number == number))
        assert f'src="data:image/png;base64,{base64.b64encode(png()).decode()}"' in body

        for src, message in ((f"artifact:{foreign.id}", "is not one of"), ("artifact:missing.png", "has no artifact"),
                             ("artifact:notes.txt", "only PNG, JPEG and SVG")):
            result = call(ctx, "write_clean_result", html=f'<p>x</p><img src="{src}">')
            assert result.is_error and message in result.content and "Nothing was saved" in result.content
        assert db.session.scalar(sa.select(Experiment.body).where(Experiment.number == number)) == body
        assert db.session.scalar(sa.select(sa.func.count()).select_from(Artifact)) == 3


def test_get_experiment_shows_the_clean_result_to_its_critic(app, make_experiment):
    """The clean-result critic reads the write-up through get_experiment: the HTML with each
    embedded figure shown as its type and size (not megabytes of base64), and the lint report;
    nothing about a result before one is written."""
    with app.app_context():
        number = make_experiment("Critiqued")
        critic = tool_context(number, "clean-result-critic")
        before = json.loads(call(critic, "get_experiment").content)
        assert before["hasCleanResult"] is False and "cleanResultHtml" not in before
        progress.store_artifact(add_pod(number), "loss.png", png(40, 30), None)
        db.session.commit()
        html = ('<section id="tldr"><h2>TL;DR</h2><ul><li>Motivation: m</li><li>What I ran: r</li>'
                '<li>Results: loss 2.2 (<a href="#figure">figure</a>)</li><li>Next steps: n</li></ul></section>'
                '<figure id="figure"><img src="artifact:loss.png" alt="Loss"></figure>'
                '<details><summary>Experimental design</summary><p>Seeds 1–3.</p></details>')
        saved = call(tool_context(number, "analyzer"), "write_clean_result", html=html, title="Loss falls")
        assert not saved.is_error, saved.content
        record = json.loads(call(critic, "get_experiment").content)
        assert record["hasCleanResult"] is True and record["cleanResultTruncated"] is False
        shown = record["cleanResultHtml"]
        assert "<li>Results: loss 2.2" in shown and '<figure id="figure">' in shown
        assert f"data:image/png;base64,[{len(png(40, 30)):,} bytes; see read_artifact]" in shown
        assert base64.b64encode(png(40, 30)).decode() not in shown
        # The title lacks its confidence suffix: the lint says so, as the owner's page does.
        assert record["cleanResultLint"].startswith("Lint: ") and "confidence" in record["cleanResultLint"]
