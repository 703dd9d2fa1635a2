"""The pipeline board `/` (SPEC §2.4, §9.3): columns, cards, filters, cheap polling."""
from __future__ import annotations

import re
from datetime import timedelta

import pytest
import sqlalchemy as sa

from models import Experiment, db
from services.core import clock, registry
from tests.conftest import OWNER_EMAIL, OWNER_PASSWORD, csrf_from
from tests.integration.pages import card_classes, cards, columns, text, your_turn_count
from tests.integration.queries import counting_queries

COLUMN_KEYS = [key for key, _title in registry.BOARD_COLUMNS]


def test_board_shows_every_column_in_spec_order(client, owner):
    """Are the eleven columns shown in SPEC order with their titles, even when empty?"""
    page = client.get("/board")
    assert page.status_code == 200
    assert [key for key, _ in columns(page)] == COLUMN_KEYS
    body = text(page)
    positions = [body.index(title) for _key, title in registry.BOARD_COLUMNS]
    assert positions == sorted(positions)


def test_card_shows_number_title_chip_and_turn(app, client, owner, make_experiment, monkeypatch):
    """Does a card show #number, the title, a status chip and the turn text (agents on)?"""
    monkeypatch.setitem(app.config, "ANTHROPIC_API_KEY", "sk-ant-test-0000000000000000")
    number = make_experiment("Warmup length vs loss spike", tags=["optim"])
    card = cards(client.get("/board"))[number]
    assert f"#{number}" in card
    assert "Warmup length vs loss spike" in card
    assert 'class="chip status-proposed"' in card and ">proposed<" in card
    assert "Sagan turn: clarify scope" in card
    assert "optim" in card
    assert "owner-turn" not in card_classes(card)


@pytest.mark.parametrize("status", ["awaiting_clarifications", "plan_pending", "reviewing",
                                    "awaiting_promotion", "blocked"])
def test_owner_turn_cards_stand_out(client, owner, make_experiment, status):
    """Does a card waiting for the owner carry the owner-turn class and its owner turn text?"""
    number = make_experiment(status=status)
    card = cards(client.get("/board"))[number]
    assert "owner-turn" in card_classes(card)
    assert registry.turn_for(status) in card


def _imported_status(app, number: int, status: str) -> None:
    """Set a status no transition reaches (imports bring `awaiting_approval` and `failed`)."""
    with app.app_context():
        db.session.execute(sa.update(Experiment).where(Experiment.number == number).values(status=status))
        db.session.commit()


@pytest.mark.parametrize("status", sorted(registry.STATUS_NAMES))
def test_card_sits_in_its_status_column(app, client, owner, make_experiment, status):
    """Is an experiment in each status shown in the column SPEC §2.4 puts it in?"""
    if status in ("awaiting_approval", "failed"):  # no transition leads there (imports do)
        number = make_experiment()
        _imported_status(app, number, status)
    else:
        number = make_experiment(status=status)
    placed = {key: numbers for key, numbers in columns(client.get("/board"))}
    assert number in placed[registry.STATUS_BY_NAME[status].column]


def _filter_fixture(make_experiment) -> dict[str, int]:
    return {
        "owner_survey": make_experiment("Tokenizer fertility survey", status="awaiting_clarifications",
                                        kind="survey", tags=["data"]),
        "sagan_exp": make_experiment("Seed variance of probe accuracy", tags=["probes", "x"]),
        "infra": make_experiment("Nightly eval harness", kind="infra", tags=["infra"]),
        "blocked_exp": make_experiment("Dropout sweep crashed", status="blocked", tags=["x"]),
    }


@pytest.mark.parametrize("query, expected", [
    ("turn=owner", {"owner_survey", "blocked_exp"}),
    ("turn=sagan", {"sagan_exp", "infra"}),
    ("kind=survey", {"owner_survey"}),
    ("kind=infra", {"infra"}),
    ("tag=x", {"sagan_exp", "blocked_exp"}),
    ("q=probe", {"sagan_exp"}),
    ("q=DROPOUT", {"blocked_exp"}),
    ("turn=owner&tag=x", {"blocked_exp"}),
    ("q=no-such-title", set()),
])
def test_filters_narrow_the_cards(client, owner, make_experiment, query, expected):
    """Do the turn / kind / tag / text filters show exactly the matching cards?"""
    made = _filter_fixture(make_experiment)
    shown = set(cards(client.get(f"/board?{query}")))
    assert shown == {made[name] for name in expected}


def test_text_filter_finds_a_number(client, owner, make_experiment):
    """Does searching "#N" find experiment N?"""
    made = _filter_fixture(make_experiment)
    assert set(cards(client.get(f"/board?q=%23{made['infra']}"))) == {made["infra"]}


@pytest.mark.parametrize("query", ["turn=everyone", "kind=poem", "q=%25", "q=_", "q=" + "9" * 40,
                                   "tag=" + "t" * 500])
def test_odd_filter_values_never_break_the_board(client, owner, make_experiment, query):
    """Are unknown filter values ignored and odd text searched literally, never a 500?"""
    made = _filter_fixture(make_experiment)
    response = client.get(f"/board?{query}")
    assert response.status_code == 200
    shown = set(cards(response))
    if query.startswith(("turn=", "kind=")):
        assert shown == set(made.values())
    else:
        assert shown == set()


def test_filter_form_keeps_the_chosen_values(client, owner, make_experiment):
    """Does the filter form show the active filter values after filtering?"""
    _filter_fixture(make_experiment)
    body = text(client.get("/board?turn=owner&kind=survey&q=fert"))
    assert '<option value="owner" selected>' in body
    assert '<option value="survey" selected>' in body
    assert 'value="fert"' in body


def test_htmx_request_gets_only_the_board_fragment(htmx_client, make_experiment):
    """Does an htmx swap get only the #board fragment (no <html>) with Vary: HX-Request?"""
    number = make_experiment("Fragment card")
    response = htmx_client.get("/board?turn=sagan")
    assert response.status_code == 200
    assert "<html" not in response.text
    first_tag = re.search(r"<[a-z][^>]*>", response.text).group(0)
    assert 'id="board"' in first_tag
    assert number in cards(response)
    assert "Vary" in response.headers and "HX-Request" in response.headers["Vary"]


def test_full_page_also_varies_on_hx_request(client, owner):
    """Does the full page say Vary: HX-Request too (so caches keep the two apart)?"""
    response = client.get("/board")
    assert "<html" in response.text
    assert "HX-Request" in response.headers.get("Vary", "")


def test_boosted_navigation_gets_the_full_page(htmx_client):
    """Does a boosted (or history-restore) htmx request get the whole page, not the fragment?"""
    for header in ("HX-Boosted", "HX-History-Restore-Request"):
        response = htmx_client.get("/board", headers={header: "true"})
        assert "<html" in response.text, header


def test_board_columns_poll_answers_304_until_something_changes(client, owner, make_experiment):
    """Does /board/columns answer 304 for the current ETag and 200 with a new ETag after a change?"""
    number = make_experiment("Polled")
    first = client.get("/board/columns")
    assert first.status_code == 200
    etag = first.headers["ETag"]
    assert number in cards(first)

    unchanged = client.get("/board/columns", headers={"If-None-Match": etag})
    assert unchanged.status_code == 304
    assert unchanged.data == b""
    assert unchanged.headers["ETag"] == etag

    clock.advance(timedelta(seconds=1))
    second_number = make_experiment("Another")
    changed = client.get("/board/columns", headers={"If-None-Match": etag})
    assert changed.status_code == 200
    assert changed.headers["ETag"] != etag
    assert second_number in cards(changed)

    # A status change (not only a new row) also changes the ETag.
    etag = changed.headers["ETag"]
    clock.advance(timedelta(seconds=1))
    client.post(f"/board/move/{number}", data={"to": "clarifying", "expected": "proposed",
                                               "csrf_token": owner.csrf()})
    moved = client.get("/board/columns", headers={"If-None-Match": etag})
    assert moved.status_code == 200
    assert moved.headers["ETag"] != etag


def test_page_embeds_the_version_it_polls_with(client, owner, make_experiment):
    """Does the board fragment poll with the same ETag the poll endpoint serves?"""
    make_experiment()
    page = text(client.get("/board"))
    etag = client.get("/board/columns").headers["ETag"]
    assert f'"If-None-Match": "\\{etag[:-1]}\\""' in page


MIX = ["proposed", "awaiting_clarifications", "plan_pending", "running", "archived",
       "blocked", "completed", "reviewing", "planning", "done_impl"]


def _make_many(make_experiment, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        status = MIX[i % len(MIX)]
        # Surveys and infra tasks never run pods (no path to `running` in the table).
        kind = "experiment" if status == "running" else registry.EXPERIMENT_KINDS[i % 3]
        make_experiment(f"Board load {i}", status=status, tags=[f"tag{i % 7}"], kind=kind)


def _queries_for(app, client, url: str) -> int:
    with counting_queries() as statements:
        response = client.get(url)
        assert response.status_code == 200
    return len(statements)


def test_board_is_a_constant_number_of_queries(app, client, owner, make_experiment):
    """Does rendering the board take as many SQL queries for 50 experiments as for 5?"""
    _make_many(make_experiment, 5)
    few = _queries_for(app, client, "/board")
    few_fragment = _queries_for(app, client, "/board/columns")
    _make_many(make_experiment, 45, start=5)
    many = _queries_for(app, client, "/board")
    assert len(cards(client.get("/board"))) == 50
    assert 0 < many == few
    assert _queries_for(app, client, "/board/columns") == few_fragment


def test_done_columns_show_the_latest_few_and_link_to_the_rest(app, client, owner, make_experiment,
                                                               monkeypatch):
    """With more finished experiments than the limit, does Done show the newest and "N more"?"""
    monkeypatch.setitem(app.config, "BOARD_DONE_LIMIT", 2)
    numbers = [make_experiment(f"Finished {i}", status="completed") for i in range(4)]
    page = client.get("/board")
    done = dict(columns(page))["done"]
    assert sorted(done) == sorted(numbers[-2:])
    assert "2 more in the table" in text(page)



def test_an_active_column_shows_its_first_few_and_the_table_lists_the_rest(app, client, owner, make_experiment,
                                                                             monkeypatch):
    """Past the limit, does an active column show the urgent card and the newest ones, say how
    many more there are, and link to the table filtered to exactly that column?"""
    monkeypatch.setitem(app.config, "BOARD_ACTIVE_LIMIT", 3)
    ideas = [make_experiment(f"Idea {i}") for i in range(5)]
    urgent = make_experiment("Idea, urgent", priority="urgent")
    running = make_experiment("Already running", status="running", kind="experiment")
    page = client.get("/board")
    placed = dict(columns(page))
    assert placed["ideas"][0] == urgent and len(placed["ideas"]) == 3
    assert set(placed["ideas"][1:]) == set(ideas[-2:])  # then the most recently moved
    assert placed["running"] == [running]  # another column keeps its own count
    link = re.search(r'href="([^"]*column=ideas[^"]*)"[^>]*>3 more in the table', page.text)
    assert link, "the column links to the table of its own statuses"
    table = client.get(link.group(1).replace("&amp;", "&"))
    listed = set(int(n) for n in re.findall(r'href="/experiments/(\d+)"', table.text))
    assert listed == set(ideas) | {urgent}
    assert "In the board’s" in text(table) or "In the board's" in text(table)
    assert "Ideas" in text(table)


def test_the_table_ignores_an_unknown_board_column(client, owner, make_experiment):
    """Does ?column= with a name that is not a board column list everything, not fail?"""
    numbers = [make_experiment("One"), make_experiment("Two", status="running", kind="experiment")]
    page = client.get("/experiments?column=nonsense")
    assert page.status_code == 200
    assert set(int(n) for n in re.findall(r'href="/experiments/(\d+)"', page.text)) >= set(numbers)


def test_each_finished_column_has_its_own_newest_few_and_count_under_a_filter(app, client, owner, make_experiment,
                                                                              monkeypatch):
    """Done and Closed each show their own newest cards and their own "N more", counted
    under the board's filter (one query finds both columns' cards)."""
    monkeypatch.setitem(app.config, "BOARD_DONE_LIMIT", 2)
    done = [make_experiment(f"Probe finished {i}", status="completed") for i in range(4)]
    make_experiment("Unrelated finished", status="completed")
    closed = [make_experiment(f"Probe closed {i}", status="cancelled") for i in range(3)]
    _imported_status(app, closed[0], "failed")
    with app.app_context():  # the failed one becomes the newest closed card
        db.session.execute(sa.update(Experiment).where(Experiment.number == closed[0]).values(
            updated_at=clock.utcnow() + timedelta(minutes=1)))
        db.session.commit()
    page = client.get("/board?q=Probe")
    placed = dict(columns(page))
    assert sorted(placed["done"]) == sorted(done[-2:])
    assert sorted(placed["closed"]) == sorted([closed[0], closed[-1]])
    assert "2 more in the table" in text(page) and "1 more in the table" in text(page)
    everything = dict(columns(client.get("/board")))
    assert len(everything["done"]) == 2 and "Unrelated finished" in text(client.get("/board"))


OWNER_TURN = ["awaiting_clarifications", "plan_pending", "blocked"]


@pytest.mark.parametrize("path", ["/", "/experiments", "/experiments/new", "/api-tokens",
                                  "/your-turn", "/experiments/{n}", "/experiments/424242"])
def test_header_counts_owner_turn_experiments_on_every_page(client, owner, make_experiment, path):
    """Does every page's header say "Your turn (3)" with three experiments waiting for the owner?"""
    for status in OWNER_TURN:
        make_experiment(f"Waiting in {status}", status=status)
    n = make_experiment("Sagan is on it", status="running")
    make_experiment("All done", status="completed")
    response = client.get(path.format(n=n))
    assert your_turn_count(response) == 3


def test_your_turn_lists_waiting_experiments_with_the_reason(client, owner, make_experiment):
    """Does /your-turn list each owner-turn experiment with its turn text, and nothing else?"""
    waiting = {make_experiment(f"Waiting in {status}", status=status): status for status in OWNER_TURN}
    busy = make_experiment("Sagan is on it", status="running")
    body = text(client.get("/your-turn"))
    for number, status in waiting.items():
        assert f"#{number}" in body
        assert f"Waiting in {status}" in body
        assert registry.turn_for(status) in body
    assert f"#{busy} " not in body and "Sagan is on it" not in body


def test_your_turn_says_when_nothing_waits(client, owner, make_experiment):
    """With nothing waiting, does /your-turn say so and the header show (0)?"""
    make_experiment("Sagan is on it")
    response = client.get("/your-turn")
    assert your_turn_count(response) == 0
    assert "Nothing waits for you" in text(response)


def test_the_column_index_comes_once_on_the_page_and_out_of_band_with_a_poll(client, owner, htmx_client,
                                                                              make_experiment):
    """Is the column index on the page once, above the board, and does a poll's answer carry it
    out of band (so its counts follow the board), with the new card counted?"""
    make_experiment("Indexed card")
    page = client.get("/board").text
    assert page.count('id="board-index"') == 1 and page.index('id="board-index"') < page.index('id="board"')
    fragment = htmx_client.get("/board").text
    assert fragment.count('id="board-index"') == 1
    index = fragment.split('id="board-index"', 1)[1].split("</nav>", 1)[0]
    assert 'hx-swap-oob="true"' in re.search(r'<nav id="board-index"[^>]*>', fragment).group(0)
    assert re.search(r'href="#column-ideas"[^>]*>Ideas <span class="count">1</span>', index)


# --- cards kept across boards (blueprints/board.py::CardBodies and the kept menus) -----------

def _fresh_board(client) -> str:
    """The board rendered with nothing kept from earlier requests."""
    from blueprints import board
    board.CARD_BODIES.clear()
    board._MENUS.clear()
    return client.get("/board").text


def test_a_board_of_kept_cards_is_the_board_rendered_afresh(client, owner, make_experiment):
    """Is the board put together from cards kept by earlier requests the same HTML as the
    board rendered with nothing kept?"""
    for status in ("proposed", "plan_pending", "running", "blocked", "implementing"):
        make_experiment(f"Kept card at {status}", status=status, tags=["probes"], priority="high")
    fresh = _fresh_board(client)
    kept = client.get("/board").text
    # The CSRF token is signed with the time: two requests a second apart carry two tokens.
    token = re.compile(r'(name="csrf_token" value=")[^"]+"|("X-CSRFToken": ")[^"]+"')
    assert token.sub(r"\1\2TOKEN\"", kept) == token.sub(r"\1\2TOKEN\"", fresh)
    assert len(cards(kept)) == 5


def test_a_kept_card_shows_a_change_to_anything_it_shows(app, client, owner, make_experiment, make_live_pod):
    """When a card's title, tags, priority or pods' progress change, or its age passes into
    the next unit, does the next board show it, though the card was kept?"""
    number = make_experiment("Before the change", tags=["optim"])
    pod = make_live_pod("A pod's card")
    client.get("/board")  # both cards kept
    with app.app_context():
        db.session.execute(sa.update(Experiment).where(Experiment.number == number).values(
            title="After the change", tags=["sae"], priority="urgent",
            last_event_at=clock.utcnow() - timedelta(days=3)))
        db.session.commit()
    response = client.post("/api/progress", json={"progressPct": 42, "message": "epoch 4 of 10", "seq": 1},
                           headers={"Authorization": f"Bearer {pod.secret}"})
    assert response.status_code == 200, response.text
    shown = cards(client.get("/board"))
    assert "After the change" in shown[number] and "Before the change" not in shown[number]
    assert ">sae<" in shown[number] and ">optim<" not in shown[number]
    assert "priority-urgent" in shown[number]
    assert "3d ago" in shown[number]
    assert "42%" in shown[pod.number] and "epoch 4 of 10" in shown[pod.number]


def test_each_session_gets_its_own_csrf_token_in_kept_menus(app, client, owner, make_experiment):
    """Menus are rendered once per process and kept: does each browser's board still carry
    that browser's own CSRF token in every card's menu, and does a move with it work?"""
    make_experiment("Menu card one")
    number = make_experiment("Menu card two")
    first = client.get("/board").text
    other = app.test_client()
    page = other.get("/login")
    other.post("/login", data={"email": OWNER_EMAIL, "password": OWNER_PASSWORD,
                               "csrf_token": csrf_from(page.text)})
    second = other.get("/board").text
    tokens_first = set(re.findall(r'name="csrf_token" value="([^"]+)"', first))
    tokens_second = set(re.findall(r'name="csrf_token" value="([^"]+)"', second))
    assert len(tokens_first) == 1 and len(tokens_second) == 1 and tokens_first != tokens_second
    assert "\x01" not in first and "\x01" not in second
    moved = other.post(f"/board/move/{number}", data={"to": "planning", "expected": "proposed",
                                                      "csrf_token": tokens_second.pop()})
    assert moved.status_code == 303
    with app.app_context():
        assert db.session.scalar(sa.select(Experiment.status).where(Experiment.number == number)) == "planning"


def test_a_kept_card_follows_the_model_key_and_an_idle_flag(app, client, owner, make_experiment, monkeypatch):
    """A card kept by an earlier board: does it say Sagan's turn once a model key is set (and
    the owner's without), rather than what it said when it was kept?"""
    number = make_experiment("Kept turn", status="proposed")
    monkeypatch.setitem(app.config, "ANTHROPIC_API_KEY", "")
    assert "write the plan (agents are off)" in cards(client.get("/board"))[number]
    monkeypatch.setitem(app.config, "ANTHROPIC_API_KEY", "sk-ant-test-0000000000000000")
    assert "Sagan turn: clarify scope" in cards(client.get("/board"))[number]


def _tag_menu(html: str) -> list[str]:
    menu = html.split('<select name="tag">', 1)[1].split("</select>", 1)[0]
    return re.findall(r'<option value="([^"]+)"', menu)


def test_the_tag_menu_is_read_again_only_when_the_board_changes(app, client, owner, make_experiment):
    """The filter menu's tags are kept with the board's version: an unchanged board renders
    without reading every experiment's tags again, and a tag changed by any of Sagan's
    statements (here a bare UPDATE, which the column's onupdate stamps) is in the next menu."""
    number = make_experiment("Tagged", tags=["optim"])
    with counting_queries() as first:
        assert _tag_menu(client.get("/board").text) == ["optim"]
    with counting_queries() as again:
        assert _tag_menu(client.get("/board").text) == ["optim"]
    assert len(again) == len(first) - 1
    assert not any("jsonb_array_elements_text" in statement for statement in again)
    with app.app_context():
        db.session.execute(sa.update(Experiment).where(Experiment.number == number).values(tags=["sae", "probes"]))
        db.session.commit()
    assert _tag_menu(client.get("/board").text) == ["probes", "sae"]
