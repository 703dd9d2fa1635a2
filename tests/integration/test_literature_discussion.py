"""A literature item's discussion (SPEC §11.3): comments on the item's page, and @claude answered
by the literature-responder in a run scoped to the item, which reads the item and its project's
beliefs; bad input (empty, oversized, agents off) is refused or told, changing nothing."""
from __future__ import annotations

import json
import re

import sqlalchemy as sa

from models import AgentRun, Comment, db
from services.core.actors import Actor
from services.research import beliefs, literature, projects
from tests.conftest import csrf_from
from tests.fakes.anthropic_server import error, reply, text, tool_use

OWNER = Actor("owner", None, "Owner")


def _item(app, **fields) -> str:
    """A paper in a project that holds one active belief; the item's id."""
    with app.app_context():
        project = projects.create_project({"title": "Probing"}, OWNER)
        beliefs.create_belief({"title": "Linear probes find the feature", "current_belief": "They do, at layer 12.",
                               "status": "active", "project": project.slug}, OWNER)
        item = literature.add({"title": "Sparse probes find features", "authors": ["Ada Lovelace"], "year": 2024,
                               "arxiv_id": "2401.01234", "abstract": "We probe layer 12 and find it.",
                               "notes": "Check their seeds.", "project_id": str(project.id), **fields}).item
        db.session.commit()
        return str(item.id)


def _comments(app) -> list[Comment]:
    with app.app_context():
        db.session.expire_all()
        rows = list(db.session.scalars(sa.select(Comment).order_by(Comment.created_at)))
        db.session.expunge_all()
        return rows


def _post(htmx_client, item_id: str, body):
    return htmx_client.post(f"/library/{item_id}/comments", headers={"X-CSRFToken": htmx_client.csrf},
                            data={"body": body})


def test_the_item_page_has_a_discussion_and_a_plain_post_returns_to_it(app, client, owner):
    """Does the item page show an empty thread with a comment form, and a plain (non-htmx) post
    land on the page's discussion with the comment, sanitized?"""
    item_id = _item(app)
    page = client.get(f"/library/{item_id}").text
    assert 'id="discussion"' in page and "No comments yet." in page
    assert f'action="/library/{item_id}/comments"' in page
    response = client.post(f"/library/{item_id}/comments",
                           data={"body": "Is **this** replicated? <script>alert(1)</script>",
                                 "csrf_token": csrf_from(page)})
    assert response.status_code == 303 and response.headers["Location"].endswith(f"/library/{item_id}#discussion")
    page = client.get(f"/library/{item_id}").text
    assert "Is <strong>this</strong> replicated?" in page and "<script>alert(1)" not in page
    [comment] = _comments(app)
    assert (comment.entity_kind, str(comment.entity_id)) == ("literature", item_id)


def test_at_claude_on_an_item_is_answered_from_the_item_and_its_beliefs(app, htmx_client, fake_anthropic, worker):
    """Does @claude on an item start a qa literature-responder run scoped to the item, whose brief
    quotes the item, whose tools read it and list the project's beliefs, and whose reply lands in
    the item's thread as Claude's?"""
    item_id = _item(app)
    fake_anthropic.script(
        reply(tool_use("read_literature", {"id": item_id}), tool_use("list_beliefs", {})),
        reply(tool_use("add_comment", {"body": "It supports B1: they probe layer 12, as B1 says."})),
        reply(text("Answered.")))
    response = _post(htmx_client, item_id, "@claude does this bear on our beliefs?")
    assert response.status_code == 200 and "Claude is answering" in response.text
    assert f'hx-get="/library/{item_id}/comments"' in response.text
    with app.app_context():
        run = db.session.scalar(sa.select(AgentRun).where(AgentRun.kind == "qa"))
        assert (run.agent, run.scope_kind, str(run.scope_id)) == ("literature-responder", "literature", item_id)
        for quoted in ("does this bear on our beliefs?", "Sparse probes find features", "Ada Lovelace",
                       "2401.01234", "We probe layer 12", "Check their seeds."):
            assert quoted in run.request, quoted
    worker()
    question, answer = _comments(app)
    assert answer.agent_run_id == question.qa_run_id and answer.author_name == "Claude"
    assert (answer.entity_kind, str(answer.entity_id)) == ("literature", item_id)
    tool_results = [block for block in fake_anthropic.requests[1].body["messages"][-1]["content"]]
    read, listed = (block["content"] for block in tool_results)
    assert json.loads(read)["notes"] == "Check their seeds."
    assert "Linear probes find the feature" in listed and "They do, at layer 12." in listed
    fragment = htmx_client.get(f"/library/{item_id}/comments").text
    assert "It supports B1" in fragment and "Claude · agent" in fragment and "every 4s" not in fragment


def test_empty_and_oversized_comments_on_an_item_are_refused(app, htmx_client):
    """Are an empty (whitespace) and an oversized comment refused with a sentence and the text
    kept, nothing stored?"""
    item_id = _item(app)
    empty = _post(htmx_client, item_id, " \u200b ")
    assert empty.status_code == 200 and "the comment is empty" in empty.text
    oversized = _post(htmx_client, item_id, "x" * 20_001)
    assert "the limit is 20,000" in oversized.text
    missing = _post(htmx_client, item_id, None)
    assert "the comment is empty" in missing.text
    assert _comments(app) == []


def test_at_claude_with_agents_off_keeps_the_comment_and_says_so(app, htmx_client):
    """Without a model key, is the comment kept, no run started, and the owner told Claude was not asked?"""
    item_id = _item(app)
    response = _post(htmx_client, item_id, "@claude summarize this?")
    assert "Claude was not asked: no ANTHROPIC_API_KEY is configured" in response.text
    assert len(_comments(app)) == 1
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id))) == 0


def test_an_unknown_item_has_no_thread(app, htmx_client):
    """Is posting to, or reading the thread of, an item that does not exist a 404 (and nothing stored)?"""
    assert _post(htmx_client, "3f0c7a4e-0000-4000-8000-000000000000", "hello").status_code == 404
    assert _post(htmx_client, "not-a-uuid", "hello").status_code == 404
    assert htmx_client.get("/library/not-a-uuid/comments").status_code == 404
    assert _comments(app) == []


def test_a_failed_reply_on_an_item_can_be_asked_again(app, htmx_client, fake_anthropic, worker):
    """When the model API refuses the question's run, does the item's thread say the reply failed
    (its run page opens), and does "Ask Claude again" start a new run whose answer lands there?"""
    item_id = _item(app)
    fake_anthropic.script(error(400, "invalid_request_error", "prompt is too long"))
    _post(htmx_client, item_id, "@claude is this replicated?")
    worker()
    fragment = htmx_client.get(f"/library/{item_id}/comments").text
    assert "Claude's reply failed" in fragment and "Ask Claude again" in fragment
    run_url = re.search(r'href="(/runs/[^"]+)">run ', fragment).group(1)
    assert htmx_client.get(run_url, headers={"HX-Request": "false"}).status_code == 200
    [question] = _comments(app)
    fake_anthropic.script(reply(tool_use("add_comment", {"body": "Not yet: one lab, one seed."})), reply(text("Done.")))
    retried = htmx_client.post(f"/comments/{question.id}/retry", headers={"X-CSRFToken": htmx_client.csrf})
    assert retried.status_code == 200 and f'hx-get="/library/{item_id}/comments"' in retried.text
    worker()
    fragment = htmx_client.get(f"/library/{item_id}/comments").text
    assert "Not yet: one lab, one seed." in fragment and "Claude's reply failed" not in fragment
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id)).where(
            AgentRun.agent == "literature-responder")) == 2
