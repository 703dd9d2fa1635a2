"""Discussion threads (SPEC §8.8): post, edit own, delete; markdown sanitized on write;
@claude starts a qa run whose reply lands in the same thread, labelled Claude."""
from __future__ import annotations

import re

import sqlalchemy as sa

from models import AgentRun, Comment, WorkflowEvent, db
from services.workflow import experiments, runs
from tests.conftest import csrf_from
from tests.fakes.anthropic_server import error, reply, text, tool_use


def _comments(app):
    with app.app_context():
        db.session.expire_all()
        return list(db.session.scalars(sa.select(Comment).order_by(Comment.created_at)))


def _run_of(app, number):
    with app.app_context():
        experiment = experiments.get_experiment(number)
        run = runs.create_run(kind="plan", agent="experiment-planner", request="Plan it.", scope_id=experiment.id)
        runs.set_status(run, "failed", error="The model API answered 529.")
        db.session.commit()
        return run.id


def test_owner_posts_markdown_and_gets_the_fragment(app, htmx_client, make_experiment):
    """Does an htmx post answer the thread fragment with the sanitized markdown, and record an event?"""
    number = make_experiment("Probe")
    response = htmx_client.post(f"/experiments/{number}/comments", headers={"X-CSRFToken": htmx_client.csrf},
                                data={"body": "**Why** 0.6%? <script>alert(1)</script> [x](javascript:alert(1))"})
    assert response.status_code == 200 and "<html" not in response.text
    assert 'id="discussion"' in response.text and "<strong>Why</strong>" in response.text
    rendered = response.text.split('class="prose comment-body">')[1].split("</div>")[0]
    assert "<script" not in response.text and "javascript:" not in rendered and "alert" not in rendered
    [comment] = _comments(app)
    assert comment.author_kind == "owner" and "<strong>Why</strong>" in comment.body_html
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(WorkflowEvent.id)).where(
            WorkflowEvent.event_type == "comment")) == 1


def test_experiment_page_shows_the_thread_and_plain_posts_redirect(app, client, owner, make_experiment):
    """Without htmx, does posting redirect back to the page's #discussion, where the comment shows?"""
    number = make_experiment("Probe")
    page = client.get(f"/experiments/{number}")
    assert 'id="discussion"' in page.text and "No comments yet." in page.text
    response = client.post(f"/experiments/{number}/comments",
                           data={"csrf_token": csrf_from(page.text), "body": "First thought"})
    assert response.status_code == 303 and response.headers["Location"].endswith("#discussion")
    assert "First thought" in client.get(f"/experiments/{number}").text


def test_empty_and_oversized_comments_are_refused(app, htmx_client, make_experiment):
    """Are an empty comment and one over 20,000 characters refused with the text kept, nothing stored?"""
    number = make_experiment("Probe")
    for body, message in (("   ", "the comment is empty"), ("x" * 20_001, "the limit is 20,000")):
        response = htmx_client.post(f"/experiments/{number}/comments", headers={"X-CSRFToken": htmx_client.csrf},
                                    data={"body": body})
        assert response.status_code == 200 and message in response.text
    assert _comments(app) == []


def test_edit_own_and_delete(app, htmx_client, make_experiment):
    """Can the owner edit their comment (marked edited) and delete it; is an empty edit refused?"""
    number = make_experiment("Probe")
    headers = {"X-CSRFToken": htmx_client.csrf}
    htmx_client.post(f"/experiments/{number}/comments", headers=headers, data={"body": "Frist"})
    [comment] = _comments(app)
    edited = htmx_client.post(f"/comments/{comment.id}/edit", headers=headers, data={"body": "First"})
    assert "First" in edited.text and "(edited)" in edited.text
    refused = htmx_client.post(f"/comments/{comment.id}/edit", headers=headers, data={"body": ""})
    assert "the comment is empty" in refused.text
    assert _comments(app)[0].body_md == "First"
    assert 'data-confirm="Delete this comment' in edited.text
    htmx_client.post(f"/comments/{comment.id}/delete", headers=headers)
    assert _comments(app) == []
    assert htmx_client.post(f"/comments/{comment.id}/delete", headers=headers).status_code == 404


def test_claude_comments_cannot_be_edited(app, htmx_client, make_experiment):
    """Is editing Claude's comment refused (403), while deleting it works?"""
    number = make_experiment("Probe")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        db.session.add(Comment(entity_kind="experiment", entity_id=experiment.id, author_kind="agent",
                               author_name="Claude", body_md="Answer", body_html="<p>Answer</p>"))
        db.session.commit()
    [comment] = _comments(app)
    headers = {"X-CSRFToken": htmx_client.csrf}
    refused = htmx_client.post(f"/comments/{comment.id}/edit", headers=headers, data={"body": "x"})
    assert refused.status_code == 403 and "only your own comments" in refused.headers["X-Sagan-Message"]
    htmx_client.post(f"/comments/{comment.id}/delete", headers=headers)
    assert _comments(app) == []


def test_run_page_has_a_discussion_too(app, client, owner, make_experiment):
    """Does the run page include the thread, and does a comment there stay on the run?"""
    number = make_experiment("Probe")
    run_id = _run_of(app, number)
    page = client.get(f"/runs/{run_id}")
    assert page.status_code == 200 and 'id="discussion"' in page.text
    client.post(f"/runs/{run_id}/comments", data={"csrf_token": csrf_from(page.text), "body": "Why 529?"})
    [comment] = _comments(app)
    assert (comment.entity_kind, comment.entity_id) == ("run", run_id)
    assert "Why 529?" in client.get(f"/runs/{run_id}").text
    thread = client.get(f"/experiments/{number}").text.split('id="discussion"')[1].split("</section>")[0]
    assert "Why 529?" not in thread


def test_at_claude_without_an_api_key_says_so(app, htmx_client, make_experiment):
    """Without ANTHROPIC_API_KEY, is the comment kept and the owner told Claude was not asked?"""
    number = make_experiment("Probe")
    response = htmx_client.post(f"/experiments/{number}/comments", headers={"X-CSRFToken": htmx_client.csrf},
                                data={"body": "@claude is the gap real?"})
    assert "Claude was not asked: no ANTHROPIC_API_KEY is configured" in response.text
    assert len(_comments(app)) == 1
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id))) == 0


def test_at_claude_answers_in_the_run_thread(app, htmx_client, make_experiment, fake_anthropic, worker):
    """Does @claude on a run start a qa comment-responder run whose reply lands on that run, as Claude?"""
    number = make_experiment("Probe")
    run_id = _run_of(app, number)
    fake_anthropic.script(
        reply(tool_use("add_comment", {"body": "The 529 was provider overload; a retry later should pass."})),
        reply(text("Answered.")))
    response = htmx_client.post(f"/runs/{run_id}/comments", headers={"X-CSRFToken": htmx_client.csrf},
                                data={"body": "@Claude why did this fail?"})
    assert "Claude is answering" in response.text and 'hx-trigger="every 4s"' in response.text
    with app.app_context():
        qa = db.session.scalar(sa.select(AgentRun).where(AgentRun.kind == "qa"))
        assert qa.agent == "comment-responder" and "why did this fail?" in qa.request
        assert "The model API answered 529." in qa.request
    worker()
    question, answer = _comments(app)
    assert question.qa_run_id is not None and answer.agent_run_id == question.qa_run_id
    assert (answer.entity_kind, answer.entity_id) == ("run", run_id)
    assert answer.author_kind == "agent" and answer.author_name == "Claude"
    fragment = htmx_client.get(f"/runs/{run_id}/comments")
    assert "provider overload" in fragment.text and "Claude · agent" in fragment.text
    assert "every 4s" not in fragment.text  # answered: the thread stops polling


def test_leaked_instructions_are_not_posted(app, htmx_client, make_experiment, fake_anthropic, worker):
    """Is a reply that repeats its instructions refused, so only the real answer is posted?"""
    number = make_experiment("Probe")
    fake_anthropic.script(
        reply(tool_use("add_comment", {"body": "Return only the comment text. The gap is noise."})),
        reply(tool_use("add_comment", {"body": "Read what you need, then answer with `add_comment`: short, direct, "
                                               "citing events or numbers you actually saw."})),
        reply(tool_use("add_comment", {"body": "The gap is within the seed spread."})),
        reply(text("Done.")))
    htmx_client.post(f"/experiments/{number}/comments", headers={"X-CSRFToken": htmx_client.csrf},
                     data={"body": "@claude is the gap noise?"})
    worker()
    bodies = [c.body_md for c in _comments(app)]
    assert bodies == ["@claude is the gap noise?", "The gap is within the seed spread."]
    results = [r.body["messages"][-1]["content"][0] for r in fake_anthropic.requests[1:3]]
    assert all(r["is_error"] and "reads like instructions" in r["content"] for r in results)


def test_a_failed_reply_is_shown_as_failed_and_can_be_asked_again(app, htmx_client, make_experiment,
                                                                   fake_anthropic, worker):
    """An @claude question whose run fails (the model API refuses the request): does the thread say
    the reply failed, with a retry that asks once (a second tap does nothing) and then shows the answer?"""
    number = make_experiment("Probe")
    fake_anthropic.script(error(400, "invalid_request_error", "prompt is too long"))
    htmx_client.post(f"/experiments/{number}/comments", headers={"X-CSRFToken": htmx_client.csrf},
                     data={"body": "@claude is the gap noise?"})
    worker()
    fragment = htmx_client.get(f"/experiments/{number}/comments").text
    assert "Claude's reply failed" in fragment and "Ask Claude again" in fragment
    assert "every 4s" not in fragment  # nothing is answering: no poll
    [question] = _comments(app)
    with app.app_context():
        asked = db.session.scalar(sa.select(sa.func.count(AgentRun.id)).where(AgentRun.kind == "qa"))
    key = re.search(r'name="form_key" value="([^"]+)"',
                    fragment[fragment.index("Ask Claude again") - 900:]).group(1)
    fake_anthropic.script(reply(tool_use("add_comment", {"body": "The gap is within the seed spread."})),
                          reply(text("Done.")))
    for _ in range(2):  # a double tap
        retried = htmx_client.post(f"/comments/{question.id}/retry", headers={"X-CSRFToken": htmx_client.csrf},
                                   data={"form_key": key})
        assert retried.status_code == 200
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id)).where(AgentRun.kind == "qa")) == asked + 1
    worker()
    fragment = htmx_client.get(f"/experiments/{number}/comments").text
    assert "The gap is within the seed spread." in fragment and "Claude's reply failed" not in fragment


def test_retrying_a_question_that_did_not_fail_is_refused(app, htmx_client, make_experiment):
    number = make_experiment("Probe")
    htmx_client.post(f"/experiments/{number}/comments", headers={"X-CSRFToken": htmx_client.csrf},
                     data={"body": "plain note"})
    [comment] = _comments(app)
    response = htmx_client.post(f"/comments/{comment.id}/retry", headers={"X-CSRFToken": htmx_client.csrf})
    assert "nothing to retry" in response.text or response.status_code == 409
