"""Ideation (SPEC §12.4): a session from a clean result, a belief, a literature item or a
project; the deck's exact texts with and without the nearest literature item and belief;
answers that autosave (htmx) or save with the button; Claude's idea cards through the real
agent loop against the loopback fake model; promotion of a card to each of its four targets,
once; discarding; and every bad form refused with a sentence and nothing changed."""
from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
import sqlalchemy as sa

from models import Comment, Experiment, db
from models.day import Todo
from models.ideation import IdeaCard, IdeationSession
from models.research import Belief, BeliefProposal, Project, RecordLink
from services.core.actors import Actor
from services.planning import ideation
from services.research import literature, links
from services.results import results
from tests.conftest import csrf_from
from tests.fakes.anthropic_server import reply, text, tool_use
from tests.integration.queries import counting_queries

OWNER = Actor("owner", None, "Ada")
RESULT_TITLE = "Curriculum ordering changes final loss by <1% (MODERATE confidence)"
HTMX = {"HX-Request": "true"}
RESULT_HTML = (Path(__file__).resolve().parents[1] / "fixtures" / "results" / "clean_result.html").read_text()


def _form(html: str, action: str) -> dict:
    """The hidden fields (CSRF token, form key) of the form that posts to `action`."""
    form = re.search(rf'<form[^>]*action="{re.escape(action)}"[^>]*>(.*?)</form>', html, re.S)
    assert form, f"no form posts to {action}"
    return dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', form.group(1)))


def _count(app, model, *where) -> int:
    with app.app_context():
        return db.session.scalar(sa.select(sa.func.count()).select_from(model).where(*where))


@pytest.fixture
def clean_result(app, make_experiment):
    """An experiment with a clean result (the curriculum finding); answers its number."""
    number = make_experiment("Does the easy-to-hard curriculum speed up the 125M model?", status="awaiting_promotion")
    with app.app_context():
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.number == number))
        results.save_clean_result(experiment, RESULT_HTML, Actor("agent", None, "analyzer"), title=RESULT_TITLE)
        db.session.commit()
    return number


def _belief(app, number, title, text, status="active") -> None:
    with app.app_context():
        db.session.add(Belief(number=number, title=title, current_belief=text, status=status))
        db.session.commit()


def _start(client, page_path: str) -> int:
    """Press "Ideate" on a record's page; answers the new session's number."""
    page = client.get(page_path)
    assert page.status_code == 200
    fields = _form(page.text, "/ideas")
    response = client.post("/ideas", data=fields)
    assert response.status_code == 303, response.text
    return int(response.headers["Location"].rsplit("/", 1)[1])


def _session(app, number) -> IdeationSession:
    with app.app_context():
        db.session.expire_all()
        session = ideation.get_session(number)
        db.session.expunge(session)
        return session


# --- the deck --------------------------------------------------------------------------

def test_the_deck_asks_for_a_paper_and_a_belief_when_the_record_has_none(app, client, owner):
    """From a belief with no library and no other belief: are the seven questions exactly the
    SPEC's, the fifth and sixth in their "none found" wording, on the page in order?"""
    _belief(app, 1, "Sparse autoencoders find monosemantic features", "Most SAE features are monosemantic.")
    number = _start(client, "/beliefs/1")
    title = "Sparse autoencoders find monosemantic features"
    assert _session(app, number).deck == [
        f'What assumption behind "{title}" would fail first?',
        f'What variable in "{title}" has never been ablated?',
        "What would a skeptical collaborator ask before trusting this?",
        "What cheap experiment would make this source less ambiguous?",
        f'Which recent paper would most threaten "{title}"?',
        "What belief would this source most strongly update?",
        "What clean result would be worth writing if this line of work succeeds?",
    ]
    page = client.get(f"/ideas/{number}").text
    shown = re.findall(r'<label for="answer-\d" class="question">(.*?)</label>', page)
    assert shown[4] == "Which recent paper would most threaten &#34;Sparse autoencoders find monosemantic features&#34;?"
    assert len(shown) == 7 and "No cards yet" in page and 'href="/beliefs/1"' in page


def test_the_deck_names_the_nearest_paper_and_belief(app, client, owner, clean_result):
    """From a clean result: does the fifth question name the library item nearest its title
    (not an unrelated one) and the sixth the nearest live belief (not a retracted one)?"""
    with app.app_context():
        literature.add({"title": "Curriculum learning for language model pretraining", "authors": ["A. Bengio"]})
        literature.add({"title": "Toy models of superposition", "authors": ["Nelson Elhage"]})
        db.session.commit()
    _belief(app, 1, "Data ordering barely matters at small scale", "A curriculum changes final loss by under 1%.")
    _belief(app, 2, "Curriculum ordering changes final loss a lot", "Retracted.", status="retracted")
    _belief(app, 3, "Features are monosemantic", "SAE features are monosemantic.")
    number = _start(client, f"/experiments/{clean_result}")
    deck = _session(app, number).deck
    assert deck[0] == f'What assumption behind "{RESULT_TITLE}" would fail first?'
    assert deck[4] == 'What would change if "Curriculum learning for language model pretraining" is right?'
    assert deck[5] == 'How should "Data ordering barely matters at small scale" change if this source is replicated?'
    page = client.get(f"/ideas/{number}").text
    assert "Curriculum learning for language model pretraining" in page and f'href="/experiments/{clean_result}' in page


def test_a_literature_item_and_a_project_start_sessions_too(app, client, owner):
    """Do the library item's and the project's pages carry "Ideate", a paper's deck not name
    the paper itself as its nearest, and each page list its earlier sessions?"""
    with app.app_context():
        project = Project(slug="curriculum", title="Curriculum learning", question="Does data order matter?")
        db.session.add(project)
        item = literature.add({"title": "Curriculum learning revisited", "authors": ["B. Author"]}).item
        db.session.commit()
        item_id = item.id
    from_item = _start(client, f"/library/{item_id}")
    assert _session(app, from_item).deck[4] == 'Which recent paper would most threaten "Curriculum learning revisited"?'
    from_project = _start(client, "/p/curriculum")
    session = _session(app, from_project)
    assert session.source_kind == "project" and session.title == "Curriculum learning"
    assert session.deck[4] == 'What would change if "Curriculum learning revisited" is right?'
    assert f'href="/ideas/{from_project}"' in client.get("/p/curriculum").text
    listing = client.get("/ideas").text
    assert f"I{from_item}" in listing and f"I{from_project}" in listing
    assert 'href="/ideas"' in client.get("/todos").text  # the way in besides each record's "Ideate"


def test_the_list_has_an_empty_state(client, owner):
    page = client.get("/ideas")
    assert page.status_code == 200 and "No ideation sessions yet" in page.text


def test_a_bad_source_is_refused_and_starts_nothing(app, client, owner, make_experiment):
    """An unknown source kind, a missing record, an experiment without a clean result, and a
    post without the CSRF token: a sentence each, and no session."""
    number = make_experiment("No result yet")
    with app.app_context():
        experiment_id = db.session.scalar(sa.select(Experiment.id).where(Experiment.number == number))
    token = csrf_from(client.get("/ideas").text)
    unknown = client.post("/ideas", data={"csrf_token": token, "source_kind": "todo", "source_id": str(experiment_id)})
    assert unknown.status_code == 422 and "starts from a clean result" in unknown.text
    missing = client.post("/ideas", data={"csrf_token": token, "source_kind": "belief",
                                          "source_id": "00000000-0000-0000-0000-000000000000"})
    assert missing.status_code == 404 and "No belief" in missing.text
    no_result = client.post("/ideas", data={"csrf_token": token, "source_kind": "clean_result",
                                            "source_id": str(experiment_id)})
    assert no_result.status_code == 404
    no_csrf = client.post("/ideas", data={"source_kind": "clean_result", "source_id": str(experiment_id)})
    assert no_csrf.status_code == 400
    assert _count(app, IdeationSession) == 0


def test_pressing_ideate_twice_with_one_form_key_starts_one_session(app, client, owner):
    _belief(app, 1, "Ordering matters", "It does.")
    fields = _form(client.get("/beliefs/1").text, "/ideas")
    first, second = client.post("/ideas", data=fields), client.post("/ideas", data=fields)
    assert first.headers["Location"] == second.headers["Location"]
    assert _count(app, IdeationSession) == 1


# --- answers ---------------------------------------------------------------------------

def test_answers_autosave_through_htmx_and_save_with_the_button(app, client, owner):
    """Does an htmx autosave store the answer and answer the "saved" line, a plain post save
    and come back to the deck, and the page show what was saved?"""
    _belief(app, 1, "Ordering matters", "It does.")
    number = _start(client, "/beliefs/1")
    page = client.get(f"/ideas/{number}").text
    assert 'hx-trigger="submit, keyup delay:800ms, change"' in page and "Save answers" in page
    token = csrf_from(page)
    saved = client.post(f"/ideas/{number}/answers", data={"csrf_token": token, "answer_1": "The seed spread."},
                        headers=HTMX)
    assert saved.status_code == 200 and "Saved at" in saved.text and 'id="answers-state"' in saved.text
    assert _session(app, number).answers == {"1": "The seed spread."}
    plain = client.post(f"/ideas/{number}/answers", data={"csrf_token": token, "answer_1": "The seed spread.",
                                                          "answer_3": "Line one\r\nline two", "answer_2": ""})
    assert plain.status_code == 303 and plain.headers["Location"].endswith(f"/ideas/{number}#deck")
    assert _session(app, number).answers == {"1": "The seed spread.", "3": "Line one\nline two"}
    cleared = client.post(f"/ideas/{number}/answers", data={"csrf_token": token, "answer_1": "  "}, headers=HTMX)
    assert cleared.status_code == 200 and _session(app, number).answers == {"3": "Line one\nline two"}
    assert "Line one\nline two</textarea>" in client.get(f"/ideas/{number}").text


def test_bad_answers_are_refused_and_save_nothing(app, client, owner):
    """A too-long answer (with a good one beside it), a question the deck does not have, and
    a post without CSRF: a sentence each (in the saved line for htmx), nothing stored."""
    _belief(app, 1, "Ordering matters", "It does.")
    number = _start(client, "/beliefs/1")
    token = csrf_from(client.get(f"/ideas/{number}").text)
    too_long = {"csrf_token": token, "answer_1": "fine", "answer_2": "x" * (ideation.ANSWER_MAX + 1)}
    refused = client.post(f"/ideas/{number}/answers", data=too_long)
    assert refused.status_code == 422
    assert "The answer to question 2 is 10,001 characters; the limit is 10,000. Nothing was saved." in refused.text
    assert 'aria-invalid="true">' + "x" * 50 in refused.text  # what was typed is shown again
    swapped = client.post(f"/ideas/{number}/answers", data=too_long, headers=HTMX)
    assert swapped.status_code == 200 and "the limit is 10,000" in swapped.text and "answers-state error" in swapped.text
    ninth = client.post(f"/ideas/{number}/answers", data={"csrf_token": token, "answer_9": "?"})
    assert ninth.status_code == 422 and "There is no question 9" in ninth.text
    assert client.post(f"/ideas/{number}/answers", data={"answer_1": "no token"}).status_code == 400
    assert _session(app, number).answers == {}
    assert client.get("/ideas/999").status_code == 404


# --- cards -----------------------------------------------------------------------------

def _answered_session(app, client) -> tuple[int, str]:
    _belief(app, 1, "Data ordering barely matters at small scale", "A curriculum changes final loss by under 1%.")
    number = _start(client, "/beliefs/1")
    token = csrf_from(client.get(f"/ideas/{number}").text)
    client.post(f"/ideas/{number}/answers", data={"csrf_token": token, "answer_2": "The warm-up length."})
    return number, token


def test_claude_proposes_cards_from_the_answers(app, client, owner, fake_anthropic, worker):
    """From the session page: does the ideation agent (real loop, fake model) read the deck
    with the answers, put its cards on the session marked Claude-proposed, and does the page
    poll while it works and stop when it is done?"""
    number, token = _answered_session(app, client)
    fake_anthropic.script(
        reply(tool_use("read_ideation_session", {})),
        reply(tool_use("propose_idea_cards", {"cards": [
            {"title": "Ablate the warm-up length at 125M", "body_md": "From answer 2: **never ablated**."},
            {"title": "Ask whether the gap holds at 350M", "body_md": "A skeptic would ask."}]})),
        reply(text("Two cards proposed.")))
    page = client.get(f"/ideas/{number}").text
    started = client.post(f"/ideas/{number}/propose", data=_form(page, f"/ideas/{number}/propose"))
    assert started.status_code == 303
    waiting = client.get(f"/ideas/{number}/cards", headers=HTMX)
    assert 'hx-trigger="every 2s"' in waiting.text and "Claude is proposing ideas" in waiting.text
    worker()
    sent = fake_anthropic.requests[1].body["messages"][-1]["content"][0]["content"]
    assert "The warm-up length." in sent and "has never been ablated" in sent
    done = client.get(f"/ideas/{number}/cards", headers=HTMX).text
    assert "every 2s" not in done and done.count("Claude-proposed") == 2
    plain = client.get(f"/ideas/{number}/cards")  # not a swap: the page, at its cards
    assert plain.status_code == 302 and plain.headers["Location"].endswith(f"/ideas/{number}#cards")
    assert "<strong>never ablated</strong>" in done and "Ask Claude for more ideas" in done
    with app.app_context():
        cards = db.session.scalars(sa.select(IdeaCard).order_by(IdeaCard.created_at)).all()
        assert [(c.origin, c.status) for c in cards] == [("claude", "open"), ("claude", "open")]
        assert all(c.agent_run_id == ideation.latest_run(ideation.get_session(number)).id for c in cards)


def test_asking_claude_needs_a_key_and_an_answer(app, client, owner):
    _belief(app, 1, "Ordering matters", "It does.")
    number = _start(client, "/beliefs/1")
    page = client.get(f"/ideas/{number}").text
    unanswered = client.post(f"/ideas/{number}/propose", data=_form(page, f"/ideas/{number}/propose"))
    assert unanswered.status_code == 422 and "Answer at least one question first" in unanswered.text
    client.post(f"/ideas/{number}/answers", data={"csrf_token": csrf_from(page), "answer_1": "Seeds."})
    saved, app.config["ANTHROPIC_API_KEY"] = app.config.get("ANTHROPIC_API_KEY"), ""
    try:
        page = client.get(f"/ideas/{number}").text
        refused = client.post(f"/ideas/{number}/propose", data=_form(page, f"/ideas/{number}/propose"))
    finally:
        app.config["ANTHROPIC_API_KEY"] = saved
    assert refused.status_code == 422 and "No ANTHROPIC_API_KEY" in refused.text
    with app.app_context():
        assert ideation.latest_run(ideation.get_session(number)) is None


def test_the_idea_tools_refuse_a_run_about_something_else(app, make_experiment):
    from services.agents import toolbox, toolkit
    from services.workflow import runs
    with app.app_context():
        run = runs.create_run(kind="apply", agent="ideation", request="x", scope_kind="experiment")
        result = toolbox.call(toolkit.ToolContext(run, None), "propose_idea_cards",
                              {"cards": [{"title": "x", "body_md": ""}]})
        assert result.is_error and "not about an ideation session" in result.content
        db.session.rollback()


def _own_card(client, number, title="Rerun with three seeds", body="Because the spread is wide.") -> str:
    page = client.get(f"/ideas/{number}").text
    added = client.post(f"/ideas/{number}/cards", data={**_form(page, f"/ideas/{number}/cards"), "title": title,
                                                        "body_md": body})
    assert added.status_code == 303, added.text
    return re.findall(r'id="card-([0-9a-f-]{36})"', client.get(f"/ideas/{number}").text)[-1]


def test_the_owners_card_and_its_bad_forms(app, client, owner):
    """Is the owner's card marked theirs (not Claude's); an empty or over-long title refused
    with what was typed, and no card made?"""
    number, _ = _answered_session(app, client)
    card_id = _own_card(client, number)
    page = client.get(f"/ideas/{number}").text
    assert "Rerun with three seeds" in page and "Yours" in page and "Claude-proposed" not in page
    for title, sentence in (("   ", "Give the idea a title"), ("y" * 301, "the limit is 300")):
        fields = _form(client.get(f"/ideas/{number}").text, f"/ideas/{number}/cards")
        refused = client.post(f"/ideas/{number}/cards", data={**fields, "title": title, "body_md": "kept text"})
        assert refused.status_code == 422 and sentence in refused.text and "kept text</textarea>" in refused.text
    assert _count(app, IdeaCard) == 1 and card_id


# --- promotion -------------------------------------------------------------------------

def _promote(client, number, card_id, target, ref="", fields=None):
    action = f"/ideas/{number}/cards/{card_id}/promote"
    fields = fields or _form(client.get(f"/ideas/{number}").text, action)
    return client.post(action, data={**fields, "target": target, "target_ref": ref})


def test_a_card_becomes_a_proposed_experiment_that_says_where_it_came_from(app, client, owner, clean_result):
    """Promoted to an experiment: is it `proposed` with the card's text, linked derives_from
    the session, with a line on its page; and does a second press (same form key, then a
    fresh one) make nothing more and say what the card became?"""
    number = _start(client, f"/experiments/{clean_result}")
    card_id = _own_card(client, number, "Ablate the warm-up length", "Never ablated.")
    fields = _form(client.get(f"/ideas/{number}").text, f"/ideas/{number}/cards/{card_id}/promote")
    first = _promote(client, number, card_id, "experiment", fields=fields)
    assert first.status_code == 303 and first.headers["Location"].endswith(f"#card-{card_id}")
    page = client.get(f"/ideas/{number}").text
    assert "Promoted to #" in page and "Ablate the warm-up length" in page
    with app.app_context():
        experiment = db.session.scalar(sa.select(Experiment).where(Experiment.title == "Ablate the warm-up length"))
        assert (experiment.status, experiment.hypothesis) == ("proposed", "Never ablated.")
        session = ideation.get_session(number)
        link = db.session.scalar(sa.select(RecordLink).where(RecordLink.source_id == experiment.id))
        assert (link.kind, link.target_kind, link.target_id) == ("derives_from", "ideation", session.id)
        new_number = experiment.number
    shown = client.get(f"/experiments/{new_number}").text
    assert f"I{number} Ideation on" in shown and f'href="/ideas/{number}"' in shown
    assert f"From ideation session I{number}" in shown
    again = _promote(client, number, card_id, "experiment", fields=fields)  # the same form key
    assert again.status_code == 303
    assert "This card was promoted already: it became #" in client.get(f"/ideas/{number}").text
    # Another tab's press (no form key in common): answers what the card became, makes no todo.
    other_tab = {"csrf_token": csrf_from(client.get(f"/ideas/{number}").text)}
    assert _promote(client, number, card_id, "literature_task", fields=other_tab).status_code == 303
    assert _count(app, Experiment, Experiment.title == "Ablate the warm-up length") == 1
    assert _count(app, Todo) == 0


def test_a_card_becomes_a_belief_update_a_literature_task_and_a_result_question(app, client, owner, clean_result):
    """Each other target: a pending update on the nearest belief (the card as its reasoning),
    a todo linked to the session, and a question in the clean result's discussion."""
    _belief(app, 1, "Data ordering barely matters at small scale", "A curriculum changes final loss by under 1%.")
    with app.app_context():
        db.session.add(Project(slug="curr", title="Curriculum"))
        db.session.commit()
    number = _start(client, f"/experiments/{clean_result}")
    to_belief = _own_card(client, number, "The gap may grow with scale", "Revisit at 350M.")
    to_todo = _own_card(client, number, "Read the curriculum survey")
    to_result = _own_card(client, number, "Is the gap inside the seed spread?")
    assert _promote(client, number, to_belief, "belief_update").status_code == 303
    assert _promote(client, number, to_todo, "literature_task").status_code == 303
    assert _promote(client, number, to_result, "result_question").status_code == 303
    with app.app_context():
        proposal = db.session.scalar(sa.select(BeliefProposal))
        assert proposal.status == "pending" and proposal.reasoning_md == "The gap may grow with scale\n\nRevisit at 350M."
        assert proposal.proposed_text == "A curriculum changes final loss by under 1%."
        todo = db.session.scalar(sa.select(Todo))
        assert todo.title == "Literature: Read the curriculum survey" and f"I{number}" in todo.body_md
        assert links.links_of("todo", todo.id)[0][0].other_url == f"/ideas/{number}"
        comment = db.session.scalar(sa.select(Comment))
        assert comment.entity_kind == "experiment" and comment.body_md.startswith("Is the gap inside the seed spread?")
    assert "Your turn: 1 proposed update" in client.get("/beliefs/1").text
    assert "Is the gap inside the seed spread?" in client.get(f"/experiments/{clean_result}").text
    page = client.get(f"/ideas/{number}").text
    assert page.count('class="promoted-to"') == 3 and "T1 Literature: Read the curriculum survey" in page


def test_bad_promotions_are_refused_and_change_nothing(app, client, owner):
    """An unknown target, a belief update with no belief to name, a result question with no
    result, a belief that does not exist, and a discarded card: a sentence each, no record,
    and the card still open (or discarded)."""
    _belief(app, 1, "Ordering matters", "It does.")
    with app.app_context():
        db.session.add(Project(slug="p", title="A project with nothing in it"))
        db.session.commit()
    number = _start(client, "/p/p")
    card_id = _own_card(client, number)
    for target, ref, status, sentence in (
            ("board", "", 422, "Promote a card to an experiment"),
            ("belief_update", "", 422, "Name the belief this idea would update"),
            ("belief_update", "B99", 404, "No belief"),
            ("result_question", "", 422, "Name the clean result the question is for"),
            ("result_question", "#1", 404, "No experiment")):
        refused = _promote(client, number, card_id, target, ref)
        assert refused.status_code == status and sentence in refused.text, (target, ref, refused.text[-500:])
    page = client.get(f"/ideas/{number}").text
    discarded = client.post(f"/ideas/{number}/cards/{card_id}/discard",
                            data=_form(page, f"/ideas/{number}/cards/{card_id}/discard"))
    assert discarded.status_code == 303
    refused = _promote(client, number, card_id, "experiment",
                       fields={"csrf_token": csrf_from(client.get(f"/ideas/{number}").text)})
    assert refused.status_code == 409 and "restore it before promoting" in refused.text
    with app.app_context():
        assert db.session.scalar(sa.select(IdeaCard.status)) == "discarded"
    assert _count(app, Experiment) == _count(app, Todo) == _count(app, BeliefProposal) == _count(app, Comment) == 0
    page = client.get(f"/ideas/{number}").text
    restored = client.post(f"/ideas/{number}/cards/{card_id}/restore",
                           data=_form(page, f"/ideas/{number}/cards/{card_id}/restore"))
    assert restored.status_code == 303
    with app.app_context():
        assert db.session.scalar(sa.select(IdeaCard.status)) == "open"


def test_a_session_is_linkable_by_its_label(app, client, owner):
    _belief(app, 1, "Ordering matters", "It does.")
    number = _start(client, "/beliefs/1")
    with app.app_context():
        ref = links.parse_reference(f"I{number}")
        assert (ref.kind, ref.url) == ("ideation", f"/ideas/{number}")


def test_the_session_page_reads_a_constant_number_of_queries(app, client, owner):
    """Does the session page cost the same queries with 2 cards as with 30?"""
    number, _ = _answered_session(app, client)

    def cost(cards: int) -> int:
        with app.app_context():
            session = ideation.get_session(number)
            for i in range(cards):
                ideation.add_card(session, f"Idea {i}", "text")
            db.session.commit()
        with counting_queries() as statements:
            assert client.get(f"/ideas/{number}").status_code == 200
        return len(statements)

    assert cost(2) == cost(28)


def test_the_nearest_paper_and_belief_on_sqlite(tmp_path):
    """On the embedded default (SQLite: FTS5's bm25 and the same word count for beliefs), is
    the nearest item the one sharing the most telling words, the source itself left out?"""
    import flask_migrate

    from services.research import beliefs
    from tests.integration.test_migrations import MIGRATIONS, _scratch_app
    lite = _scratch_app(f"sqlite:///{tmp_path / 'sagan.db'}")
    try:
        with lite.app_context():
            flask_migrate.upgrade(directory=MIGRATIONS)
            near = literature.add({"title": "Curriculum learning for language model pretraining"}).item
            literature.add({"title": "Toy models of superposition"})
            db.session.add_all([Belief(number=1, title="Curriculum ordering barely matters", current_belief="x",
                                       status="active"),
                                Belief(number=2, title="Features are monosemantic", current_belief="y",
                                       status="active")])
            db.session.commit()
            text = "Curriculum ordering changes final loss by <1%"
            assert literature.nearest(text).title == near.title
            assert literature.nearest(text, exclude_id=near.id) is None
            assert literature.nearest("the and of") is None
            assert beliefs.nearest(text).number == 1
            assert beliefs.nearest("zebra crossing") is None
    finally:
        with lite.app_context():
            db.session.remove()
            db.engine.dispose()


def test_two_presses_at_once_promote_a_card_once(app, client, owner):
    """Two requests promoting the same card at the same moment (no shared form key): does the
    row lock make the second answer the first one's experiment instead of making another?"""
    import threading
    from concurrent.futures import ThreadPoolExecutor
    number, _ = _answered_session(app, client)
    card_id = _own_card(client, number)
    both_ready = threading.Barrier(2)

    def press():
        with app.app_context():
            session = ideation.get_session(number)
            card = ideation.get_card(session, card_id)
            both_ready.wait(timeout=10)
            promoted = ideation.promote(session, card, "experiment", OWNER)
            db.session.commit()
            return promoted.card.promoted_id, promoted.created

    with ThreadPoolExecutor(max_workers=2) as pool:
        answers = list(pool.map(lambda _: press(), range(2)))
    assert len({record_id for record_id, _ in answers}) == 1
    assert sorted(created for _, created in answers) == [False, True]
    assert _count(app, Experiment) == 1 and _count(app, RecordLink) == 1


def test_a_cards_markdown_is_sanitized(app, client, owner):
    """Does a card's body (Claude's or the owner's) render through the one sanitizer?"""
    number, _ = _answered_session(app, client)
    _own_card(client, number, "Hostile", '**bold** <script>alert(1)</script><img src=x onerror="alert(2)">')
    page = client.get(f"/ideas/{number}").text
    assert "<strong>bold</strong>" in page and "<script>alert(1)" not in page and "onerror" not in page


def test_the_demo_has_one_session_on_its_curriculum_belief(app, client, owner):
    """After the curated demo, is there one session on the curriculum belief with its answers
    and cards (none promoted), shown on the belief's page and the list — and does a second
    load add nothing?"""
    from services.pipeline import demo, demo_ideation
    with app.app_context():
        demo.load_curated()
        assert demo_ideation.load_ideation() is False
        session = db.session.scalar(sa.select(IdeationSession))
        assert session.source_kind == "belief" and session.answers == demo_ideation.ANSWERS
        assert [c.status for c in ideation.cards(session)] == ["open", "open"]
        belief_number = db.session.get(Belief, session.source_id).number
    assert _count(app, IdeationSession) == 1
    assert f'href="/ideas/{session.number}"' in client.get(f"/beliefs/{belief_number}").text
    assert "Ablate the warm-up length at 125M" in client.get(f"/ideas/{session.number}").text


def test_the_list_reads_a_constant_number_of_queries(app, client, owner):
    """Does /ideas cost the same queries with 1 session as with 12 (cards counted in one query)?"""
    _belief(app, 1, "Ordering matters", "It does.")

    def cost(sessions: int) -> int:
        with app.app_context():
            belief = db.session.scalar(sa.select(Belief))
            for _ in range(sessions):
                ideation.add_card(ideation.start_session("belief", belief.id, OWNER), "An idea", "")
            db.session.commit()
        with counting_queries() as statements:
            assert client.get("/ideas").status_code == 200
        return len(statements)

    assert cost(1) == cost(11)


def test_a_result_question_renders_before_the_card_is_locked(app, client, owner, clean_result, monkeypatch):
    """Is the question's comment sanitized with no transaction open (on SQLite an open one
    holds the write lock), so the render neither stalls other writers nor ends the lock?"""
    from services.core import sanitize
    number = _start(client, f"/experiments/{clean_result}")
    card_id = _own_card(client, number, "Is the gap inside the seed spread?")
    fields = _form(client.get(f"/ideas/{number}").text, f"/ideas/{number}/cards/{card_id}/promote")
    seen: list[bool] = []
    real = sanitize._clean

    def noting(html, policy):
        seen.append(db.session().in_transaction())
        return real(html, policy)

    locked: list[bool] = []
    real_post = ideation.discussion.post_comment

    def post_then_check_the_lock(*args, **kwargs):
        # Another connection tries the card's row: the promotion must still hold it after the comment.
        posted = real_post(*args, **kwargs)
        with db.engine.connect() as other:
            try:
                other.execute(sa.text("SELECT id FROM idea_cards WHERE id = :id FOR UPDATE NOWAIT"),
                              {"id": uuid.UUID(card_id)})
                locked.append(False)
            except sa.exc.OperationalError:
                locked.append(True)
            other.rollback()
        return posted

    monkeypatch.setattr(sanitize, "_clean", noting)
    monkeypatch.setattr(ideation.discussion, "post_comment", post_then_check_the_lock)
    assert _promote(client, number, card_id, "result_question", fields=fields).status_code == 303
    assert seen and not any(seen), seen
    assert locked == [True]
    assert _count(app, Comment) == 1
