"""Moving a card on the board: `POST /board/move/<n>` (SPEC §2.4). The server decides;
refusals are shown on the card and change nothing."""
from __future__ import annotations

import re

import sqlalchemy as sa

from models import WorkflowEvent, db
from services.workflow import experiments
from tests.integration.pages import cards, text


def _move(client, number: int, to: str, expected: str | None, note: str | None = None, query: str = ""):
    data = {"to": to}
    if expected is not None:
        data["expected"] = expected
    if note is not None:
        data["note"] = note
    return client.post(f"/board/move/{number}{query}", data=data, headers={"X-CSRFToken": client.csrf})


def _state(app, number: int) -> tuple[str, list[tuple[str, str, str | None]]]:
    """The experiment's status and its state_changed events (from, to, note), oldest first."""
    with app.app_context():
        experiment = experiments.get_experiment(number)
        events = db.session.execute(
            sa.select(WorkflowEvent.from_status, WorkflowEvent.to_status, WorkflowEvent.note)
            .where(WorkflowEvent.entity_id == experiment.id, WorkflowEvent.event_type == "state_changed")
            .order_by(WorkflowEvent.created_at)).all()
        return experiment.status, [tuple(e) for e in events]


def _card_error(response, number: int) -> str:
    match = re.search(r'class="error card-error"[^>]*>(.*?)</p>', cards(response)[number], re.S)
    assert match, "the card shows no error"
    return text(match.group(1)).strip()


def test_allowed_move_answers_the_board_fragment_and_triggers_refresh(app, htmx_client, make_experiment):
    """Does proposed → clarifying answer the #board fragment, trigger pipeline-changed and log the board note?"""
    number = make_experiment("Attention sinks")
    response = _move(htmx_client, number, "clarifying", "proposed")
    assert response.status_code == 200
    assert "<html" not in response.text and 'id="board"' in response.text
    assert response.headers["HX-Trigger"] == "pipeline-changed"
    assert 'data-status="clarifying"' in cards(response)[number]
    status, events = _state(app, number)
    assert status == "clarifying"
    assert events == [("proposed", "clarifying", "Moved on Pipeline board to clarifying.")]


def test_idea_to_planning_uses_the_spec_note(app, htmx_client, make_experiment):
    """Does proposed → planning log "Moved from idea to planning on the Pipeline board."?"""
    number = make_experiment()
    assert _move(htmx_client, number, "planning", "proposed").status_code == 200
    assert _state(app, number) == ("planning", [
        ("proposed", "planning", "Moved from idea to planning on the Pipeline board.")])


def test_answered_questions_redispatch_note(app, htmx_client, make_experiment):
    """Does awaiting_clarifications → clarifying log "Owner re-dispatched the planner from awaiting_clarifications."?"""
    number = make_experiment(status="awaiting_clarifications")
    assert _move(htmx_client, number, "clarifying", "awaiting_clarifications").status_code == 200
    status, events = _state(app, number)
    assert status == "clarifying"
    assert events[-1] == ("awaiting_clarifications", "clarifying",
                          "Owner re-dispatched the planner from awaiting_clarifications.")


def test_forbidden_move_shows_the_refusal_on_the_card(app, htmx_client, make_experiment):
    """Is proposed → running refused with the reason and allowed moves on the card, status unchanged?"""
    number = make_experiment()
    response = _move(htmx_client, number, "running", "proposed")
    assert response.status_code == 200  # htmx swaps only 2xx: the card must show the reason
    assert "HX-Trigger" not in response.headers
    message = _card_error(response, number)
    assert "cannot move from proposed to running" in message
    assert "clarifying" in message and "planning" in message
    assert 'data-status="proposed"' in cards(response)[number]
    assert _state(app, number) == ("proposed", [])


def test_unknown_status_is_refused_with_a_clear_message(app, htmx_client, make_experiment):
    """Is a move to a status that does not exist refused with a message naming it?"""
    number = make_experiment()
    response = _move(htmx_client, number, "warp_speed", "proposed")
    assert "Unknown status 'warp_speed'" in _card_error(response, number)
    assert _state(app, number) == ("proposed", [])


def test_empty_target_is_refused(app, htmx_client, make_experiment):
    """Is a move with no target refused with a message, status unchanged?"""
    number = make_experiment()
    response = _move(htmx_client, number, "", "proposed")
    assert response.status_code == 200
    assert _card_error(response, number)
    assert _state(app, number) == ("proposed", [])


def test_stale_expected_status_says_the_card_moved(app, htmx_client, make_experiment):
    """If the card moved since the board was drawn, is the move refused saying where it is now?"""
    number = make_experiment(status="clarifying")  # the board still showed it as proposed
    before = _state(app, number)
    response = _move(htmx_client, number, "planning", "proposed")
    message = _card_error(response, number)
    assert "is now clarifying" in message
    assert "reload" in message.lower()
    assert _state(app, number) == before


def test_blocked_without_a_note_is_refused(app, htmx_client, make_experiment):
    """Does moving to blocked without a note ask for one and change nothing?"""
    number = make_experiment()
    for note in (None, "", "    "):
        response = _move(htmx_client, number, "blocked", "proposed", note=note)
        assert "needs a note" in _card_error(response, number)
    assert _state(app, number) == ("proposed", [])


def test_blocked_with_a_note_keeps_the_owner_note(app, htmx_client, make_experiment):
    """Does a blocked move with a note go through, keeping the owner's words in the event?"""
    number = make_experiment()
    response = _move(htmx_client, number, "blocked", "proposed", note="Waiting for the licence.")
    assert response.status_code == 200
    status, events = _state(app, number)
    assert status == "blocked"
    assert events[-1][2] == "Moved on Pipeline board to blocked. Waiting for the licence."
    assert 'data-column="blocked"' in text(response)


def test_archive_needs_a_note_too(app, htmx_client, make_experiment):
    """Is archiving from the board refused without a note?"""
    number = make_experiment()
    response = _move(htmx_client, number, "archived", "proposed")
    assert "needs a note" in _card_error(response, number)
    assert _state(app, number) == ("proposed", [])


def test_move_of_an_unknown_experiment_is_404(htmx_client):
    """Does moving a card that does not exist answer 404?"""
    assert _move(htmx_client, 424242, "clarifying", "proposed").status_code == 404


def test_move_answer_keeps_the_board_filters(app, htmx_client, make_experiment):
    """Does the board returned after a move keep the active filters of the page?"""
    moved = make_experiment("Sagan's turn card")
    other = make_experiment("Waiting card", status="awaiting_clarifications")
    response = _move(htmx_client, moved, "blocked", "proposed", note="stuck", query="?turn=owner")
    assert set(cards(response)) == {moved, other}
    response = _move(htmx_client, other, "clarifying", "awaiting_clarifications", query="?turn=owner")
    assert set(cards(response)) == {moved}


def test_move_without_htmx_answers_the_whole_page(app, client, owner, make_experiment):
    """Does the no-JavaScript form post get the full board page back — after a redirect
    (post/redirect/get), so a reload of it moves nothing?"""
    number = make_experiment()
    response = client.post(f"/board/move/{number}?turn=sagan", data={"to": "clarifying", "expected": "proposed",
                                                                     "csrf_token": owner.csrf()})
    assert response.status_code == 303
    assert response.headers["Location"] == f"/board?turn=sagan#card-{number}"  # the filters kept
    page = client.get(response.headers["Location"])
    assert page.status_code == 200 and "<html" in page.text
    assert 'data-status="clarifying"' in cards(page)[number]
    assert _state(app, number)[0] == "clarifying"


def test_refused_move_without_htmx_comes_back_on_the_card_once(app, client, owner, make_experiment):
    """A no-JavaScript refusal: a redirect to the board, whose card shows the refusal and keeps
    the chosen status and note — once (a reload is the plain board), nothing moved."""
    number = make_experiment()
    response = client.post(f"/board/move/{number}", data={"to": "blocked", "expected": "proposed", "note": " ",
                                                          "csrf_token": owner.csrf()})
    assert response.status_code == 303 and response.headers["Location"] == f"/board#card-{number}"
    page = client.get(response.headers["Location"])
    assert "needs a note" in _card_error(page, number)
    assert _chosen_option(cards(page)[number]) == "blocked"
    assert "card-error" not in cards(client.get("/board"))[number]
    assert _state(app, number) == ("proposed", [])


def _chosen_option(card_html: str) -> str | None:
    """The value the card's "Move to…" menu holds (the placeholder's is "")."""
    select = re.search(r'<select name="to".*?</select>', card_html, re.S).group(0)
    chosen = re.findall(r'<option value="([^"]*)"[^>]*\bselected\b', select)
    assert len(chosen) == 1, f"the menu holds {len(chosen)} selected options"
    return chosen[0]


def _note_value(card_html: str) -> str | None:
    match = re.search(r'<input type="text" name="note"[^>]*?value="([^"]*)"', card_html)
    return text(match.group(1)) if match else None


def test_refused_move_keeps_the_chosen_status_and_note(app, htmx_client, make_experiment, make_planless_pending):
    """After a refusal, does the card's open menu still hold the status and note the
    owner chose, so one more tap sends it again — and do the other cards hold nothing?"""
    number = make_experiment("Refused with a choice")
    other = make_experiment("A bystander")
    response = _move(htmx_client, number, "blocked", "proposed", note="   ")
    card = cards(response)[number]
    assert "needs a note" in _card_error(response, number)
    assert re.search(r'<details class="move" open>', card)
    assert _chosen_option(card) == "blocked"
    assert _chosen_option(cards(response)[other]) == ""
    assert "card-override" not in card  # the menu offers blocked: no override needed

    response = _move(htmx_client, number, "blocked", "proposed", note="Waiting for the <licence> & keys")
    assert _state(app, number)[0] == "blocked"  # the kept choice goes through with the note

    guarded = make_planless_pending()
    response = _move(htmx_client, guarded, "approved", "plan_pending", note="Ship it")
    card = cards(response)[guarded]
    assert "has no plan waiting for approval" in _card_error(response, guarded)
    assert _chosen_option(card) == "approved"
    assert _note_value(card) == "Ship it"


def test_refused_note_is_escaped_when_kept(app, htmx_client, make_experiment):
    """Is the kept note put back as text, never as markup?"""
    number = make_experiment()
    response = _move(htmx_client, number, "warp_speed", "proposed", note='"><script>alert(1)</script>')
    assert "<script>alert(1)</script>" not in response.text  # the raw answer: entities, no tag
    assert _note_value(response.text) == '"><script>alert(1)</script>'


def test_move_the_menu_does_not_offer_links_to_the_override_holding_it(app, htmx_client, make_experiment):
    """A drag to a column with no allowed move (proposed → running): does the card name the
    chosen status and link to the experiment page's override, opened with that status chosen?"""
    number = make_experiment("Straight to running")
    response = _move(htmx_client, number, "running", "proposed")
    card = cards(response)[number]
    assert "cannot move from proposed to running" in _card_error(response, number)
    assert _chosen_option(card) == ""  # running is not in the menu: it is not silently re-offered
    override = re.search(r'<p class="card-override">(.*?)</p>', card, re.S)
    assert override and "You chose running." in re.sub(r"<[^>]+>", "", text(override.group(1)))
    link = re.search(r'href="([^"]+)"', override.group(1)).group(1)
    assert text(link) == f"/experiments/{number}?override_to=running#status"

    page = htmx_client.get(text(link).split("#")[0], headers={"HX-Request": ""}).text
    status_panel = re.search(r'<section class="panel status-panel.*?</section>', page, re.S).group(0)
    assert '<details class="override" open>' in status_panel
    override_select = re.search(r'<details class="override".*?</details>', status_panel, re.S).group(0)
    assert _chosen_option(override_select) == "running"
    assert _state(app, number) == ("proposed", [])


def test_override_link_ignores_odd_or_current_statuses(app, client, owner, make_experiment):
    """Does the page ignore an unknown or unchanged `override_to` (closed override, nothing chosen)?"""
    number = make_experiment()
    for value in ("warp_speed", "proposed", "", "Running", "running%20"):
        page = client.get(f"/experiments/{number}?override_to={value}")
        assert page.status_code == 200
        override = re.search(r'<details class="override"([^>]*)>.*?</details>', page.text, re.S)
        assert "open" not in override.group(1), value
        assert _chosen_option(override.group(0)) == "", value


def test_unknown_status_offers_no_override(app, htmx_client, make_experiment):
    """A status that does not exist is refused without an override link to it."""
    number = make_experiment()
    response = _move(htmx_client, number, "warp_speed", "proposed")
    assert "card-override" not in cards(response)[number]
