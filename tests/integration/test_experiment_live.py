"""The live, result-first experiment page: the poll (ETag → 304 at a
constant number of queries, the panels afresh after a change, no poll once ended), the stage
stepper, the result first, answers beside their questions, readable names, the spec alarm."""
from __future__ import annotations

import re
import uuid
from datetime import timedelta
from pathlib import Path

import sqlalchemy as sa

from models import Experiment, Pod, db
from services.agents import implementation
from services.core import clock, events
from services.core.actors import Actor
from services.planning import approvals, importer, questions
from services.results import results
from services.workflow import experiments, runs
from tests.integration.pages import text
from tests.integration.queries import counting_queries

PLANS = Path(__file__).resolve().parents[1] / "fixtures" / "plans"
TWO_POD = (PLANS / "two_pod_seed_sweep.md").read_text()
AGENT = Actor("agent", "run", "planner")
RESULT = ('<section id="tldr"><h2>TL;DR</h2><ul><li>Motivation: m</li><li>What I ran: r</li>'
          '<li>Results: accuracy 0.91</li><li>Next steps: n</li></ul></section>'
          '<figure id="figure"><svg viewBox="0 0 10 10"><circle cx="5" cy="5" r="2"></circle></svg>'
          '<figcaption>c</figcaption></figure><details><summary>Design</summary><p>d</p></details>')


def _poll_element(html: str) -> str:
    match = re.search(r'<div id="experiment-live"[^>]*>', html)
    assert match, "the page has no live element"
    return match.group(0)


def _version(html: str) -> str:
    return re.search(r'data-version="([0-9a-f]+)"', _poll_element(html)).group(1)


def _poll(client, number: int, version: str):
    return client.get(f"/experiments/{number}/live", headers={"If-None-Match": f'"{version}"', "HX-Request": "true"})


def _note(app, number: int, note: str) -> None:
    with app.app_context():
        clock.advance(timedelta(seconds=1))
        events.record(experiments.get_experiment(number), "note", Actor("system", None, "t"), note=note)
        db.session.commit()


def _add_pod(app, number: int, index: int = 0) -> uuid.UUID:
    """A pod of a finished dispatch run (one live dispatch per experiment is the database's rule)."""
    with app.app_context():
        experiment = experiments.get_experiment(number)
        run = runs.create_run(kind="experiment", agent="provisioner", request="d", scope_id=experiment.id,
                              status="completed")
        pod = Pod(id=uuid.uuid4(), agent_run_id=run.id, experiment_id=experiment.id, account="local",
                  name=f"sagan-{number}-x-{index}-1", status="running")
        db.session.add(pod)
        db.session.commit()
        return pod.id


# --- the poll ----------------------------------------------------------------------------------

def test_the_page_polls_at_the_configured_interval_with_its_version(app, client, owner, make_experiment):
    """Does the open page poll `live` every POLL_EXPERIMENT_SECONDS with its version as If-None-Match?"""
    number = make_experiment(status="clarifying")
    html = client.get(f"/experiments/{number}").text
    element = _poll_element(html)
    assert f'hx-get="/experiments/{number}/live"' in element
    assert f'hx-trigger="every {app.config["POLL_EXPERIMENT_SECONDS"]}s' in element
    assert f'"If-None-Match": "\\"{_version(html)}\\""' in element.replace("&#34;", '"')


def test_an_unchanged_page_answers_304_and_a_change_brings_the_panels(app, client, owner, make_experiment):
    """Is the poll 304 (no body) while nothing changed, and after a new event the live panels
    with the event, a new version and no page chrome?"""
    number = make_experiment(status="clarifying")
    version = _version(client.get(f"/experiments/{number}").text)
    quiet = _poll(client, number, version)
    assert quiet.status_code == 304 and quiet.data == b"" and quiet.headers["ETag"] == f'"{version}"'
    _note(app, number, "The planner read the related work.")
    changed = _poll(client, number, version)
    assert changed.status_code == 200 and "<html" not in changed.text
    assert "The planner read the related work." in changed.text
    assert _version(changed.text) != version and changed.headers["ETag"] == f'"{_version(changed.text)}"'
    assert _poll(client, number, _version(changed.text)).status_code == 304


def test_each_panel_source_moves_the_version(app, client, owner, make_experiment):
    """Do a pod's progress, a plan with its approval request, a clean result and a status move each
    change the version (so each panel refreshes), and nothing else does?"""
    number = make_experiment("Seed sweep", status="planning", pod_account="personal")
    seen = [_version(client.get(f"/experiments/{number}").text)]

    def moved() -> bool:
        with app.app_context():
            version = experiments.page_version(number).version
        fresh = version not in seen
        seen.append(version)
        return fresh

    assert not moved()
    with app.app_context():
        approvals.submit_plan(experiments.get_experiment(number), TWO_POD, AGENT, source="agent")
        db.session.commit()
    assert moved()
    pod_id = _add_pod(app, number)
    assert moved()
    with app.app_context():
        clock.advance(timedelta(seconds=1))
        db.session.execute(sa.update(Pod).where(Pod.id == pod_id).values(progress_pct=40, updated_at=clock.utcnow()))
        db.session.commit()
    assert moved()
    with app.app_context():
        clock.advance(timedelta(seconds=1))
        results.save_clean_result(experiments.get_experiment(number), RESULT, Actor("owner"), title="T")
        db.session.commit()
    assert moved()
    assert not moved()


def test_the_poll_is_two_queries_however_big_the_experiment(app, client, owner, make_experiment):
    """Does the unchanged poll cost the same queries (the session's user and the fingerprint) for
    an experiment with 3 events as for one with 300 events and pods?"""
    small = make_experiment("Small", status="clarifying")
    large = make_experiment("Large", status="clarifying")
    with app.app_context():
        experiment = experiments.get_experiment(large)
        for i in range(300):
            events.record(experiment, "note", Actor("system", None, "t"), note=f"bulk {i}")
        db.session.commit()
    _add_pod(app, large, 0)
    _add_pod(app, large, 1)
    counts = {}
    for number in (small, large):
        version = _version(client.get(f"/experiments/{number}").text)
        with counting_queries() as statements:
            assert _poll(client, number, version).status_code == 304
        counts[number] = len(statements)
    assert counts[small] == counts[large] <= 2, counts


def test_polling_stops_once_the_experiment_has_ended(app, client, owner, make_experiment):
    """Does a completed experiment's page carry no poll, and a live one's answer stop it when it ends?"""
    number = make_experiment("Done (HIGH confidence)", status="completed")
    element = _poll_element(client.get(f"/experiments/{number}").text)
    assert "hx-get" not in element and "hx-trigger" not in element


def test_a_live_fragment_is_only_for_htmx(app, client, owner, make_experiment):
    """Does a plain GET of `live` (a reload, a bookmarked fragment URL) go to the page instead?"""
    number = make_experiment(status="clarifying")
    response = client.get(f"/experiments/{number}/live")
    assert response.status_code == 303 and response.headers["Location"].endswith(f"/experiments/{number}")
    assert client.get("/experiments/987654/live", headers={"HX-Request": "true"}).status_code == 404


# --- the stepper ---------------------------------------------------------------------------------

def test_the_stepper_says_where_how_long_what_and_who(app, client, owner, make_experiment):
    """Does the stepper mark the current stage, how long the experiment has been there, and who acts next?"""
    number = make_experiment("Vague", status="clarifying")
    with app.app_context():
        questions.ask(experiments.get_experiment(number), [{"key": "base-model", "text": "Which base model?"}], AGENT)
        db.session.commit()
    clock.advance(timedelta(minutes=3))
    html = text(client.get(f"/experiments/{number}"))
    stepper = re.search(r'<section class="stepper.*?</section>', html, re.S).group(0)
    assert re.search(r'class="stage stage-current" aria-current="step">.*?Clarifying', stepper, re.S)
    assert 'stage stage-done' in stepper and 'stage stage-todo' in stepper
    assert "for 3 min" in stepper
    assert "Next: <strong>You</strong> — answer Sagan questions" in stepper


def test_a_blocked_experiment_is_blocked_on_the_stage_it_left(app, client, owner, make_experiment):
    number = make_experiment("Crashed", status="blocked")
    stepper = re.search(r'<section class="stepper.*?</section>', text(client.get(f"/experiments/{number}")),
                        re.S).group(0)
    assert re.search(r'stage stage-blocked" aria-current="step">.*?Running', stepper, re.S)


# --- result first ---------------------------------------------------------------------------------

def test_a_result_opens_first_and_the_work_folds_away(app, client, owner, make_experiment):
    """With a clean result, is it the first section, with the plan, runs and pods folded (closed) below;
    without one, are those sections open?"""
    number = make_experiment("Result (HIGH confidence)", status="awaiting_promotion")
    with app.app_context():
        results.save_clean_result(experiments.get_experiment(number), RESULT, Actor("owner"),
                                  title="Result (HIGH confidence)")
        db.session.commit()
    html = client.get(f"/experiments/{number}").text
    assert html.index('id="clean-result"') < html.index('id="fold-plan"') < html.index('id="fold-pods"')
    for key in ("record", "plan", "runs", "pods"):
        assert re.search(rf'<details class="fold" id="fold-{key}" data-fold\s*>', html), key
    fresh = client.get(f"/experiments/{make_experiment('Fresh', status='clarifying')}").text
    assert re.search(r'<details class="fold" id="fold-plan" data-fold open>', fresh)
    assert fresh.index('id="fold-pods"') < fresh.index('id="clean-result"')


def test_the_metric_and_cost_slots_are_in_the_page(app, client, owner, make_experiment):
    """Are the partials for the metric charts and the cost ledger included (they are filled elsewhere)?"""
    source = Path(app.root_path, "templates", "experiments", "_live.html").read_text()
    assert source.count('{% include "experiments/_metrics.html" %}') == 2
    assert source.count('{% include "experiments/_cost.html" %}') == 2


# --- answers, names ------------------------------------------------------------------------------

def test_answers_are_shown_with_their_questions(app, client, owner, make_experiment):
    """After answering, does the page show each question with the owner's answer?"""
    number = make_experiment("Vague", status="clarifying")
    with app.app_context():
        questions.ask(experiments.get_experiment(number),
                      [{"key": "base-model", "text": "Which base model?"},
                       {"key": "budget", "text": "What budget?"}], AGENT)
        db.session.commit()
    page = client.get(f"/experiments/{number}").text
    from tests.conftest import csrf_from
    done = client.post(f"/experiments/{number}/answers", data={
        "answer-base-model": "Qwen 7B", "answer-budget": "", "expected": "awaiting_clarifications",
        "csrf_token": csrf_from(page)})
    assert done.status_code == 303 and done.headers["Location"].endswith("#answered-questions")
    html = text(client.get(done.headers["Location"]))
    section = re.search(r'<section class="panel answered-questions".*?</section>', html, re.S).group(0)
    assert "<dt>Which base model?</dt><dd>Qwen 7B</dd>" in section
    assert "What budget?" not in section  # not answered, so not listed as if it were


def test_the_timeline_speaks_in_words_not_internal_names(app, client, owner, make_experiment):
    """Are status names and markers on the timeline written for a person (no awaiting_clarifications,
    no epm:clarify), though the stored notes keep the SPEC's words?"""
    number = make_experiment("Vague", status="clarifying")
    with app.app_context():
        questions.ask(experiments.get_experiment(number), [{"key": "k", "text": "Which?"}], AGENT)
        questions.answer(experiments.get_experiment(number), {"k": "That one"}, Actor("owner"))
        db.session.commit()
    timeline = re.search(r'<ol class="timeline" id="timeline-list">.*?</ol>',
                         text(client.get(f"/experiments/{number}")), re.S).group(0)
    assert "awaiting_clarifications" not in timeline and "epm:" not in timeline.lower()
    assert "awaiting clarifications → clarifying" in timeline
    assert "Clarifying questions" in timeline and "Your answers" in timeline
    assert "re-dispatched the planner from awaiting clarifications" in timeline


# --- the spec alarm -------------------------------------------------------------------------------

def test_the_spliced_branch_and_commit_raise_no_spec_alarm(app, client, owner, make_experiment):
    """After Sagan splices the tested branch and commit into the pods' env, is there no "differs
    from the approved plan" alarm; and a real change still raises it, without the git variables?"""
    number = make_experiment("Seed sweep", status="planning", pod_account="personal")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        submission = approvals.submit_plan(experiment, TWO_POD, AGENT, source="agent")
        approvals.approve(submission.approval, Actor("owner"), confirm_unchecked=True)
        implementation.splice(experiment, "experiment-7", "a" * 40)
        db.session.commit()
    page = client.get(f"/experiments/{number}").text
    assert "differs from the approved plan" not in page
    with app.app_context():
        experiment = experiments.get_experiment(number)
        spec = [dict(pod) for pod in experiment.pod_spec]
        spec[1]["gpuCount"] = 4
        db.session.execute(sa.update(Experiment).where(Experiment.id == experiment.id).values(pod_spec=spec))
        db.session.commit()
    page = text(client.get(f"/experiments/{number}"))
    diff = re.search(r'<pre class="diff"><code>(.*?)</code>', page, re.S).group(1)
    assert '+    "gpuCount": 4' in diff and "SAGAN_GIT_COMMIT" not in diff


# --- the plan as a checklist ----------------------------------------------------------------------

def test_the_plan_checklist_reads_as_a_checklist_and_file_names_are_not_links(app, client, owner, make_experiment):
    """Does the plan's checklist section show the owner's ticks (from the approval; the planner's
    own as a label) and textbox answers, never the
    literal [x], [ ], [TEXTBOX:…]; and is a file name like probe.py left as text, not a link?"""
    number = make_experiment("Seed sweep", status="planning", pod_account="personal")
    plan = TWO_POD.replace("Metric: held-out probe accuracy.", "Metric: held-out probe accuracy, from probe.py.")
    with app.app_context():
        submission = approvals.submit_plan(experiments.get_experiment(number), plan, AGENT, source="agent")
        approvals.set_checklist_item(submission.approval, "Ten seeds are enough", True)
        approvals.defer(submission.approval, Actor("owner"), answers={"budget-notes": "up to $10"})
        db.session.commit()
    html = text(client.get(f"/experiments/{number}"))
    plan_section = re.search(r'<section class="panel" id="plan">.*?</section>', html, re.S).group(0)
    # The paste form's template shows the markdown to write, [ ] included; the plan shown is above it.
    plan_section = plan_section.split('<details class="paste-plan"', 1)[0]
    assert "[x]" not in plan_section and "[ ]" not in plan_section and "[TEXTBOX" not in plan_section
    checklist = re.search(r'<ul class="checklist-view">.*?</ul>', plan_section, re.S).group(0)
    # The planner's `[x]` is its own: the owner's tick is not made for them.
    assert re.search(r'class="unticked".*?Goal and hypothesis match the record <span class="chip planner-checked">'
                     r'planner: checked</span>', checklist, re.S)
    assert re.search(r'class="unticked".*?Budget of about \$5 is acceptable', checklist, re.S)
    assert re.search(r'class="ticked".*?Ten seeds are enough', checklist, re.S)
    assert "<dt>Budget notes</dt><dd>up to $10</dd>" in plan_section
    assert "probe.py" in plan_section and "http://probe.py" not in plan_section


def test_a_local_pod_is_labelled_as_a_local_process(app, client, owner, make_experiment):
    """A local pod whose spec named an RTX 4090 on SECURE: does its card say it is a process on this
    machine with no charge, not "RTX 4090 · SECURE" and "$0.00/h"?"""
    number = make_experiment("Local", status="running")
    pod_id = _add_pod(app, number)
    with app.app_context():
        db.session.execute(sa.update(Pod).where(Pod.id == pod_id).values(gpu_type_id="RTX 4090", gpu_count=1,
                                                                        cloud_type="SECURE", cost_per_hr=0))
        db.session.commit()
    card = re.search(r'<article class="pod-card.*?</article>', client.get(f"/experiments/{number}").text,
                     re.S).group(0)
    assert "Local pod · a process on this machine" in card and "no charge" in card
    assert "RTX 4090" not in card and "SECURE" not in card and "$0.00/h" not in card


def test_one_pods_progress_posts_fold_into_one_timeline_row(app, client, owner, make_experiment):
    """Eight epochs posted by pod 0 between two other events: one row "pod 0: epochs 1–8", the
    posts behind it; a lone post of another pod stays a row of its own."""
    number = make_experiment("Sweep", status="running")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        events.record(experiment, "note", Actor("system", None, "t"), note="Before the epochs.")
        for epoch in range(1, 9):
            clock.advance(timedelta(seconds=1))
            events.record(experiment, "progress", Actor("pod", "pod-a", "pod"), note=f"{10 + 10 * epoch}% · epoch {epoch}/8",
                          metadata={"pod": "sagan-1-x-0-1", "run_index": 0})
        clock.advance(timedelta(seconds=1))
        events.record(experiment, "progress", Actor("pod", "pod-b", "pod"), note="5% · bootstrap complete",
                      metadata={"pod": "sagan-1-x-1-1", "run_index": 1})
        db.session.commit()
    timeline = re.search(r'<ol class="timeline" id="timeline-list">.*?</ol>\s*</section>',
                         text(client.get(f"/experiments/{number}")), re.S).group(0)
    assert timeline.count('class="event event-progress event-folded"') == 1
    assert "pod 0: epochs 1–8 · now 90% · epoch 8/8" in timeline
    assert timeline.count("epoch 3/8") == 1  # inside the fold, once
    assert "5% · bootstrap complete" in timeline and "Before the epochs." in timeline


def test_two_pods_posting_side_by_side_fold_into_a_row_each(app, client, owner, make_experiment):
    number = make_experiment("Sweep", status="running")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        for epoch in range(1, 9):
            for index in (0, 1):
                clock.advance(timedelta(seconds=1))
                events.record(experiment, "progress", Actor("pod", f"pod-{index}", "pod"),
                              note=f"{10 + 10 * epoch}% · seed {index}: epoch {epoch}/8",
                              metadata={"pod": f"sagan-1-x-{index}-1", "run_index": index})
        db.session.commit()
    timeline = re.search(r'<ol class="timeline" id="timeline-list">.*?</ol>\s*</section>',
                         text(client.get(f"/experiments/{number}")), re.S).group(0)
    assert timeline.count('class="event event-progress event-folded"') == 2
    assert "pod 1: epochs 1–8" in timeline and "pod 0: epochs 1–8" in timeline


def test_a_new_timeline_event_moves_the_version_however_long_the_timeline(app, client, owner, make_experiment):
    """The timeline's part of the fingerprint is its newest stamp (it is append-only): each
    new event, even one recorded within the same second as the last, moves the version."""
    number = make_experiment("Long timeline", status="planning")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        for i in range(50):
            events.record(experiment, "note", Actor("system"), note=f"Event {i}.")
        db.session.commit()
        before = experiments.page_version(number).version
        events.record(experiments.get_experiment(number), "note", Actor("system"), note="One more.")
        db.session.commit()
        after = experiments.page_version(number).version
        assert after != before
        assert experiments.page_version(number).version == after  # nothing else moves it


def test_a_reimport_of_older_events_moves_the_version(app, client, owner, make_experiment):
    """Events imported later but dated earlier than the newest do not move the timeline's
    stamp; the import touches the experiment, so an open page still refreshes."""
    number = make_experiment("Imported", status="planning")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        events.record(experiment, "note", Actor("system"), note="Recent.")
        db.session.commit()
        before = experiments.page_version(number).version
        report = importer.ImportReport()
        importer._add_events(experiments.get_experiment(number), [
            {"id": str(uuid.uuid4()), "eventType": "note", "note": "From the old system.",
             "createdAt": "2026-01-05T10:00:00Z", "actorKind": "system"}], report)
        db.session.commit()
        assert report.events_created == 1
        assert experiments.page_version(number).version != before


# --- progress posts wait a little (blueprints/progress_holds.py) --------------------------------

def _posting_pod(app, number: int) -> tuple[uuid.UUID, str]:
    """A running pod of the experiment with a progress token (its posts go through the real API)."""
    from services.dispatch import tokens
    pod_id = _add_pod(app, number)
    secret, digest = tokens.new_token()
    with app.app_context():
        db.session.execute(sa.update(Pod).where(Pod.id == pod_id).values(progress_token_hash=digest))
        db.session.commit()
    return pod_id, secret


def _post_progress(app, client, token: str, seq: int) -> None:
    with app.app_context():
        clock.advance(timedelta(seconds=1))
    answer = client.post("/api/progress", json={"progressPct": seq, "message": f"step {seq}", "seq": seq},
                         headers={"Authorization": f"Bearer {token}"})
    assert answer.status_code < 300, answer.text


def test_progress_posts_alone_refresh_the_page_at_most_every_few_seconds(app, client, owner, make_experiment,
                                                                          monkeypatch):
    """A running experiment's pods post progress, and each post moves the page's version. Does
    the poll keep the page's version (304, no render) for LIVE_PROGRESS_SECONDS after the page
    was rendered, then bring the panels with the newest progress — and does anything else (a
    note in the timeline, a pod's status) still come at once?"""
    from blueprints import progress_holds
    progress_holds.forget()
    now = [1000.0]
    monkeypatch.setattr(progress_holds.time, "monotonic", lambda: now[0])
    number = make_experiment("Posting pods", status="running")
    pod_id, token = _posting_pod(app, number)
    version = _version(client.get(f"/experiments/{number}").text)

    _post_progress(app, client, token, 1)
    with app.app_context():
        assert experiments.page_version(number).version != version  # the post did move it
    held = _poll(client, number, version)
    assert held.status_code == 304 and held.headers["ETag"] == f'"{version}"'
    now[0] += 14
    _post_progress(app, client, token, 2)
    assert _poll(client, number, version).status_code == 304

    now[0] += 1  # LIVE_PROGRESS_SECONDS (15) after the render: the panels, with the newest post
    fresh = _poll(client, number, version)
    assert fresh.status_code == 200 and "2% · step 2" in fresh.text
    version = _version(fresh.text)

    _post_progress(app, client, token, 3)
    assert _poll(client, number, version).status_code == 304
    _note(app, number, "The analyst looked at the curves.")  # not progress: at once
    noted = _poll(client, number, version)
    assert noted.status_code == 200 and "The analyst looked at the curves." in noted.text
    version = _version(noted.text)

    _post_progress(app, client, token, 4)
    with app.app_context():
        db.session.execute(sa.update(Pod).where(Pod.id == pod_id).values(status="exited"))
        db.session.commit()
    stopped = _poll(client, number, version)  # a pod's status: at once, though progress came with it
    assert stopped.status_code == 200 and "pod-exited" in stopped.text


def test_with_no_wait_every_progress_post_refreshes_the_page(app, client, owner, make_experiment, monkeypatch):
    from blueprints import progress_holds
    progress_holds.forget()
    monkeypatch.setitem(app.config, "LIVE_PROGRESS_SECONDS", 0)
    number = make_experiment("Posting pods, no wait", status="running")
    _pod_id, token = _posting_pod(app, number)
    version = _version(client.get(f"/experiments/{number}").text)
    _post_progress(app, client, token, 1)
    assert _poll(client, number, version).status_code == 200


def test_what_besides_progress_changed_is_told_on_the_embedded_sqlite_database(app, tmp_path):
    """The check behind the wait reads the timeline's stamps and the pods' statuses: on SQLite
    (make run's default) does a progress event alone count as nothing else, while a note or a
    pod's new status counts?"""
    import flask_migrate

    import config as sagan_config
    from app import create_app

    class SQLiteConfig(sagan_config.TestConfig):
        SQLALCHEMY_DATABASE_URI = f"sqlite:///{tmp_path / 'sagan.db'}"
        SQLALCHEMY_ENGINE_OPTIONS: dict = {}
    lite = create_app(SQLiteConfig)
    with lite.app_context():
        flask_migrate.upgrade(directory=str(Path(__file__).resolve().parents[2] / "migrations"))
        experiment = experiments.create_experiment({"title": "On SQLite"}, Actor("owner"))
        run = runs.create_run(kind="experiment", agent="provisioner", request="d", scope_id=experiment.id,
                              status="completed")
        pod = Pod(id=uuid.uuid4(), agent_run_id=run.id, experiment_id=experiment.id, account="local",
                  name="sagan-lite-0", status="running")
        db.session.add(pod)
        db.session.commit()
        statuses = frozenset({(str(pod.id), "running")})
        clock.advance(timedelta(seconds=1))
        since = clock.utcnow()
        clock.advance(timedelta(seconds=1))
        events.record(experiment, "progress", Actor("pod", str(pod.id), "pod"), note="10% · step 1")
        db.session.commit()
        assert not experiments.changed_besides_progress(experiment.number, since, statuses)
        clock.advance(timedelta(seconds=1))
        events.record(experiment, "note", Actor("system", None, "t"), note="A note.")
        db.session.commit()
        assert experiments.changed_besides_progress(experiment.number, since, statuses)
        later = clock.utcnow()
        assert not experiments.changed_besides_progress(experiment.number, later, statuses)
        db.session.execute(sa.update(Pod).where(Pod.id == pod.id).values(status="exited"))
        db.session.commit()
        assert experiments.changed_besides_progress(experiment.number, later, statuses)
        db.session.remove()
        db.engine.dispose()
