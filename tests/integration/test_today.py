"""Today `/` (SPEC §12.1): the ranked "Needs you" queue and its actions in place, Running,
Yesterday, Next, Spend, the cheap poll — and todos that follow their experiment (§12.2)."""
from __future__ import annotations

import re
import uuid
from datetime import date, timedelta

import pytest
import sqlalchemy as sa

from models import ApprovalRequest, Experiment, Pod, db
from models.day import Todo
from models.ideation import IdeaCard
from models.notification import NotificationEmail
from models.research import Belief, BeliefProposal
from services.core import clock, registry
from services.core.actors import Actor
from services.day import daily_log, todos, weekly_review
from services.planning import ideation
from services.research import beliefs
from services.workflow import experiments, lifecycle
from services.workflow import runs as runs_service
from tests.conftest import csrf_from
from tests.integration.queries import counting_queries

OWNER = Actor("owner", None, "owner")


@pytest.fixture
def make_belief(app):
    def make(title="Narrow finetuning generalizes", **fields):
        with app.app_context():
            belief = beliefs.create_belief({"title": title, "status": "active", **fields}, OWNER)
            db.session.commit()
            return belief.number
    return make


@pytest.fixture
def make_ideas(app, make_belief):
    """A session on a new belief with Claude's open cards `titles`; answers (session number, card ids)."""
    def make(titles, belief_title="Curricula barely matter"):
        number = make_belief(belief_title)
        with app.app_context():
            session = ideation.start_session("belief", beliefs.get_belief(number).id, OWNER)
            cards = [ideation.add_card(session, title, "Why: the answers.", origin="claude") for title in titles]
            db.session.commit()
            return session.number, [str(card.id) for card in cards]
    return make


@pytest.fixture
def make_proposal(app, make_belief):
    def make(title="Narrow finetuning generalizes", experiment_number=None) -> str:
        number = make_belief(title)
        with app.app_context():
            belief = beliefs.get_belief(number)
            experiment = experiments.get_experiment(experiment_number) if experiment_number else None
            proposal = beliefs.propose_update(belief, experiment, None, status="supported", confidence="MODERATE",
                                              text="It holds over three seeds.", evidence="3 of 3 seeds.",
                                              reasoning="The result held.")
            db.session.commit()
            return str(proposal.id)
    return make


def _approval_id(app, number: int) -> str:
    with app.app_context():
        return str(db.session.scalar(sa.select(ApprovalRequest.id).join(Experiment, Experiment.id ==
                                     ApprovalRequest.experiment_id).where(Experiment.number == number)))


def _status(app, number: int) -> str:
    with app.app_context():
        db.session.expire_all()
        return db.session.scalar(sa.select(Experiment.status).where(Experiment.number == number))


def _queue(html: str) -> list[str]:
    """The queue's rows in order, as their ids (need-<kind>-<key>)."""
    section = html.split('id="needs-title"', 1)[1].split("</section>", 1)[0]
    return re.findall(r'<li class="queue-item need[^"]*"\s+id="(need-[^"]+)"', section)


def _post(client, kind, key, action, htmx=False, **form):
    data = {"action": action, "csrf_token": csrf_from(client.get("/").text), **form}
    headers = {"HX-Request": "true"} if htmx else {}
    return client.post(f"/today/{kind}/{key}", data=data, headers=headers)


# --- the page -------------------------------------------------------------------------------

def test_today_is_the_home_page_with_empty_states(client, owner):
    """Is `/` Today, with every section's empty state, "Today" first in the nav and the board at /board?"""
    page = client.get("/")
    assert page.status_code == 200
    html = page.text
    assert "<title>Today" in html
    for sentence in ("Nothing waits for you", "Nothing is running", "No log entry for yesterday yet",
                     "Nothing lined up", "Spend"):
        assert sentence in html, sentence
    nav = html.split('class="topnav"', 1)[1].split("</nav>", 1)[0]
    assert nav.index(">Today<") < nav.index(">Board<")
    assert client.get("/board").status_code == 200
    assert 'id="board"' in client.get("/board").text


def test_login_lands_on_today(client, auth):
    """After logging in, does the owner land on Today?"""
    auth.create_owner()
    response = auth.login()
    assert response.status_code == 302 and response.headers["Location"] == "/"


def test_today_needs_the_owner(client, app, owner):
    """Does a stranger get the login page, not Today, and no action?"""
    stranger = app.test_client()
    assert stranger.get("/").status_code == 302
    assert stranger.get("/today/live").status_code == 302
    assert stranger.post("/today/plan/x", data={"action": "approve"}).status_code in (302, 400, 403)


def test_queue_ranks_priority_then_waiting_then_cost(app, client, owner, make_experiment, make_proposal):
    """Urgent first; among equals the longest waiting first; a deferred plan last."""
    old_normal = make_experiment("Old normal", status="blocked")
    urgent = make_experiment("Urgent plan", status="plan_pending", priority="urgent")
    newer_normal = make_experiment("Newer normal", status="awaiting_clarifications")
    deferred = make_experiment("Deferred plan", status="plan_pending", priority="urgent")
    proposal = make_proposal()
    with app.app_context():
        moment = clock.utcnow()
        for number, back in ((old_normal, 3), (newer_normal, 1)):
            db.session.execute(sa.update(Experiment).where(Experiment.number == number)
                               .values(last_event_at=moment - timedelta(hours=back)))
        db.session.execute(sa.update(BeliefProposal).values(created_at=moment - timedelta(hours=2)))
        db.session.commit()
    assert _post(client, "plan", _approval_id(app, deferred), "defer", note="later").status_code == 303
    order = _queue(client.get("/").text)
    assert order == [f"need-plan-{_approval_id(app, urgent)}", f"need-blocked-{old_normal}",
                     f"need-belief_update-{proposal}", f"need-question-{newer_normal}",
                     f"need-plan-{_approval_id(app, deferred)}"]
    assert "Today (5)" in client.get("/").text


def test_cost_breaks_a_tie_dearest_first(app):
    """Same priority and waiting time: the dearer item first."""
    from services.planning.today import Need
    moment = clock.utcnow()
    cheap = Need("plan", "a", "#1", "Cheap", "", "/", "normal", moment, 1.0)
    dear = Need("plan", "b", "#2", "Dear", "", "/", "normal", moment, 40.0)
    assert sorted([cheap, dear], key=lambda n: n.sort_key) == [dear, cheap]


# --- actions --------------------------------------------------------------------------------

def test_approve_a_plan_in_place_then_again(app, client, owner, make_experiment):
    """Approve from the queue through the approval service; a second tap says it is already approved."""
    number = make_experiment("Approve me", status="plan_pending")
    approval = _approval_id(app, number)
    first = _post(client, "plan", approval, "approve", htmx=True, confirm_unchecked="1")
    assert first.status_code == 200 and "Approved: #%d" % number in first.text
    assert _status(app, number) in ("approved", "implementing")
    second = _post(client, "plan", approval, "approve", htmx=True, confirm_unchecked="1")
    assert second.status_code == 200 and "already approved" in second.text
    assert f"need-plan-{approval}" not in "".join(_queue(client.get("/").text))


def test_unticked_checklist_needs_the_confirmation(app, client, owner, make_experiment):
    """The approval page's guard holds on Today: unticked items refuse until confirmed."""
    number = make_experiment("Checklist", status="plan_pending")
    approval = _approval_id(app, number)
    with app.app_context():
        row = db.session.get(ApprovalRequest, approval)
        row.checklist = {"Seeds fixed": False}
        db.session.commit()
    refused = _post(client, "plan", approval, "approve", htmx=True)
    assert "not ticked" in refused.text and 'name="confirm_unchecked"' in refused.text
    assert _status(app, number) == "plan_pending"
    done = _post(client, "plan", approval, "approve", htmx=True, confirm_unchecked="1")
    assert "Approved" in done.text


def test_reject_needs_a_note_and_defer_keeps_it_waiting(app, client, owner, make_experiment):
    number = make_experiment("Reject me", status="plan_pending")
    approval = _approval_id(app, number)
    refused = _post(client, "plan", approval, "reject", htmx=True)
    assert "Say why you reject" in refused.text and _status(app, number) == "plan_pending"
    deferred = _post(client, "plan", approval, "defer", htmx=True, note="after the deadline")
    assert "Deferred" in deferred.text and _status(app, number) == "plan_pending"
    with app.app_context():
        assert db.session.get(ApprovalRequest, approval).defer_note == "after the deadline"
    rejected = _post(client, "plan", approval, "reject", htmx=True, note="wrong baseline")
    assert "Rejected" in rejected.text and _status(app, number) == "planning"


def test_without_javascript_an_action_redirects_with_its_sentence(app, client, owner, make_experiment):
    number = make_experiment("No JS", status="plan_pending")
    approval = _approval_id(app, number)
    response = _post(client, "plan", approval, "defer")
    assert response.status_code == 303 and response.headers["Location"].endswith(f"#need-plan-{approval}")
    page = client.get("/").text
    assert "Deferred: #%d" % number in page
    assert "Deferred: #%d" % number not in client.get("/").text  # shown once


def test_accept_and_reject_belief_updates(app, client, owner, make_proposal):
    accepted = make_proposal("Accept me")
    answer = _post(client, "belief_update", accepted, "accept", htmx=True)
    assert "Accepted: B" in answer.text
    with app.app_context():
        assert db.session.get(BeliefProposal, accepted).status == "accepted"
        belief = db.session.get(Belief, db.session.get(BeliefProposal, accepted).belief_id)
        assert belief.status == "supported" and belief.version == 2
    again = _post(client, "belief_update", accepted, "accept", htmx=True)
    assert again.status_code == 200 and "already accepted" in again.text.lower()
    rejected = make_proposal("Reject me")
    answer = _post(client, "belief_update", rejected, "reject", htmx=True, note="one seed is not enough")
    assert "Rejected" in answer.text
    with app.app_context():
        assert db.session.get(BeliefProposal, rejected).resolution_note == "one seed is not enough"


def test_a_belief_edited_meanwhile_is_not_overwritten(app, client, owner, make_proposal):
    """The proposal was made against version 1; the owner edits the belief; accepting from Today is refused."""
    proposal = make_proposal("Moved belief")
    with app.app_context():
        belief = db.session.get(Belief, db.session.get(BeliefProposal, proposal).belief_id)
        beliefs.edit_belief(belief, {"current_belief": "Edited by hand."}, OWNER)
        db.session.commit()
    answer = _post(client, "belief_update", proposal, "accept", htmx=True)
    assert answer.status_code == 200 and "changed since" in answer.text
    with app.app_context():
        assert db.session.get(BeliefProposal, proposal).status == "pending"


def test_answer_questions_from_the_queue(app, client, owner, make_experiment):
    number = make_experiment("Ask me", status="awaiting_clarifications")
    page = client.get("/").text
    keys = re.findall(r'name="answer-([a-z0-9_-]+)"', page)
    assert keys, "the row shows the planner's questions"
    empty = _post(client, "question", str(number), "answer", htmx=True)
    assert "Answer at least one question" in empty.text and _status(app, number) == "awaiting_clarifications"
    answered = _post(client, "question", str(number), "answer", htmx=True, **{f"answer-{keys[0]}": "Use seed 7."})
    assert "Answered" in answered.text and _status(app, number) == "clarifying"
    moved = _post(client, "question", str(number), "answer", htmx=True, **{f"answer-{keys[0]}": "Again."})
    assert moved.status_code == 200 and "not waiting for answers" in moved.text


def test_act_after_the_item_moved_elsewhere(app, client, owner, make_experiment):
    """The owner rejects the plan on its own page; Today's approve then says what happened."""
    number = make_experiment("Moved", status="plan_pending")
    approval = _approval_id(app, number)
    page = client.get("/").text  # the queue as the owner saw it
    assert f"need-plan-{approval}" in page
    _post(client, "plan", approval, "reject", note="done elsewhere")
    answer = _post(client, "plan", approval, "approve", htmx=True, confirm_unchecked="1")
    assert answer.status_code == 200 and "already rejected" in answer.text
    assert _status(app, number) == "planning"


def test_unblock_and_claude_proposed(app, client, owner, make_experiment):
    blocked = make_experiment("Blocked one", status="blocked")
    answer = _post(client, "blocked", str(blocked), "unblock", htmx=True)
    assert "Unblocked" in answer.text and _status(app, blocked) != "blocked"
    again = _post(client, "blocked", str(blocked), "unblock", htmx=True)
    assert again.status_code == 200 and "is now" in again.text
    with app.app_context():
        proposed = experiments.create_experiment({"title": "Claude's idea"}, Actor("agent", None, "Claude"))
        proposed.proposed_by_agent = True
        db.session.commit()
        number = proposed.number
    assert f"need-proposed-{number}" in client.get("/").text
    dismissed = _post(client, "proposed", str(number), "dismiss", htmx=True)
    assert "Dismissed" in dismissed.text and _status(app, number) == "archived"


@pytest.mark.parametrize("kind, key, action, status", [
    ("nonsense", "1", "approve", 404),        # unknown kind
    ("waiting", "1", "open", 404),            # a kind with no action on Today
    ("plan", "not-a-uuid", "explode", 400),   # an action the kind does not have
])
def test_bad_actions_are_refused_and_change_nothing(app, client, owner, make_experiment, kind, key, action, status):
    number = make_experiment("Untouched", status="plan_pending")
    response = _post(client, kind, key, action)
    assert response.status_code == status
    assert _status(app, number) == "plan_pending"


def test_unknown_item_answers_in_the_row(app, client, owner):
    answer = _post(client, "plan", "3f1b6a52-0000-4000-8000-000000000000", "approve", htmx=True)
    assert answer.status_code == 200 and "No such approval request" in answer.text
    answer = _post(client, "question", "99999", "answer", htmx=True)
    assert answer.status_code == 200 and "no experiment #99999" in answer.text


def test_missing_csrf_is_refused(app, client, owner, make_experiment):
    number = make_experiment("CSRF", status="plan_pending")
    response = client.post(f"/today/plan/{_approval_id(app, number)}", data={"action": "defer"})
    assert response.status_code == 400
    with app.app_context():
        assert db.session.scalar(sa.select(ApprovalRequest.deferred_at)) is None


# --- the other sections ----------------------------------------------------------------------

def test_running_yesterday_next_and_spend(app, client, owner, make_experiment, make_belief):
    running = make_experiment("Training run", status="running")
    with app.app_context():
        experiment = experiments.get_experiment(running)
        now = clock.utcnow()
        db.session.add(Pod(experiment_id=experiment.id, account="team", name="pod-today-1", gpu_type_id="A100",
                           status="running", cost_per_hr=2.5, uptime_seconds=3600, last_started_at=now - timedelta(hours=1),
                           progress_pct=40, progress_message="epoch 4/10"))
        todo = todos.create_todo({"title": "Read the probing paper", "priority": "high"}, OWNER)
        beliefs.edit_belief(beliefs.get_belief(make_belief("Probes find it")), {"next_test": "Probe layer 12."}, OWNER)
        daily_log.write(daily_log.today() - timedelta(days=1), "scheduler")
        db.session.commit()
        todo_number = todo.number
    html = client.get("/").text
    running_section = html.split('id="running-title"', 1)[1].split("</section>", 1)[0]
    assert f"#{running}" in running_section and "40%" in running_section and "epoch 4/10" in running_section
    assert "$2.50/h" in running_section
    assert "Read yesterday" in html
    assert f"T{todo_number}" in html and "Probe layer 12." in html
    spend_section = html.split('id="spend-title"', 1)[1].split("</section>", 1)[0]
    assert "$2.50" in spend_section  # an hour of an A100 at $2.50 today


def _spend_cells(html: str, row: str) -> dict:
    """The by-classification table's cells of one row ("This week", "This month")."""
    table = html.split('today-spend-classes', 1)[1].split("</table>", 1)[0]
    cells = table.split(f'<th scope="row">{row}</th>', 1)[1].split("</tr>", 1)[0]
    return {name: " ".join(re.sub(r"<[^>]+>", " ", text).split()) for name, text in
            re.findall(r'data-classification="([a-z_]+)">(.*?)</td>', cells, re.S)}


def test_spend_splits_agents_by_run_classification(app, client, owner, make_experiment):
    """Are this week's and this month's agent costs split into useful, not useful,
    unclassified and archived, each with its runs, a run of last month in the month only
    when it is this month, an unpriced run marked?"""
    number = make_experiment("Costly", status="running")
    with app.app_context():
        experiment_id = experiments.get_experiment(number).id
        now = clock.utcnow()
        day = daily_log.today()
        week_start = daily_log.bounds(day - timedelta(days=day.weekday()))[0]
        month_start = daily_log.bounds(day.replace(day=1))[0]
        for classification, cost, started in (("useful", 1.5, now), ("useful", 0.5, now),
                                              ("not_useful", 0.75, now), ("pending", None, now),
                                              ("archived", 0.1, now)):
            run = runs_service.create_run(kind="apply", agent="analyzer", request="Work.", scope_id=experiment_id)
            run.cost_usd, run.classification, run.started_at = cost, classification, started
        # Before this week: in the month's split only if it is still this month.
        earlier = week_start - timedelta(hours=1)
        older = runs_service.create_run(kind="apply", agent="analyzer", request="Old.", scope_id=experiment_id)
        older.cost_usd, older.classification, older.started_at = 4.0, "useful", earlier
        db.session.commit()
        earlier_in_month = earlier >= month_start
    html = client.get("/").text
    week = _spend_cells(html, "This week")
    assert week["useful"] == "$2.00 2 runs" and week["not_useful"] == "$0.75 1 run"
    assert week["pending"].startswith("$0.00") and "+?" in week["pending"] and week["pending"].endswith("1 run")
    assert week["archived"] == "$0.10 1 run"
    month = _spend_cells(html, "This month")
    assert month["useful"] == ("$6.00 3 runs" if earlier_in_month else "$2.00 2 runs")
    assert month["archived"] == "$0.10 1 run"
    assert "/runs?classification=pending" in html


def _next_section(html: str) -> str:
    return html.split('id="next-title"', 1)[1].split("</section>", 1)[0]


def test_claude_proposed_ideas_wait_in_next(app, client, owner, make_ideas):
    """Are Claude's open idea cards in "Next" — newest first, one per session, at most three,
    each linking to its card on its session — and not the owner's own, a discarded or a
    promoted card?"""
    assert "Ideas Claude proposed" not in client.get("/").text
    first, (oldest, newer_in_first) = make_ideas(["Oldest idea", "Second idea of I1"], "Belief one")
    second, (mine_placeholder,) = make_ideas(["Discard me"], "Belief two")
    third, (promote_me,) = make_ideas(["Promote me"], "Belief three")
    fourth, (shown_fourth,) = make_ideas(["Idea of the fourth"], "Belief four")
    fifth, (shown_fifth,) = make_ideas(["Idea of the fifth"], "Belief five")
    sixth, (shown_sixth,) = make_ideas(["Idea of the sixth"], "Belief six")
    with app.app_context():
        session = ideation.get_session(second)
        ideation.discard(ideation.get_card(session, mine_placeholder))
        ideation.add_card(session, "The owner's own idea", "")  # not Claude's: not a nudge
        session = ideation.get_session(third)
        ideation.promote(session, ideation.get_card(session, promote_me), "literature_task", OWNER)
        # The first session's cards are the newest of all: it is listed by its newest card.
        db.session.execute(sa.update(IdeaCard).where(IdeaCard.id == uuid.UUID(newer_in_first))
                           .values(created_at=clock.utcnow() + timedelta(minutes=5)))
        db.session.commit()
    section = _next_section(client.get("/").text)
    assert "Ideas Claude proposed" in section
    listed = re.findall(r'<li id="idea-([0-9a-f-]+)">', section)
    assert listed == [newer_in_first, shown_sixth, shown_fifth]
    assert f'href="/ideas/{first}#card-{newer_in_first}"' in section and "1 more there" in section
    ideas = section.split("Ideas Claude proposed", 1)[1]
    for absent in ("Oldest idea", "Discard me", "The owner&#39;s own idea", "Promote me", "Idea of the fourth"):
        assert absent not in ideas, absent
    assert "Literature: Promote me" in section  # what the promoted card became: an open todo
    assert 'href="/ideas"' in section and "All 5 open ideas" in section


# --- the poll --------------------------------------------------------------------------------

def test_poll_answers_304_until_something_changes(app, client, owner, make_experiment, make_proposal):
    page = client.get("/").text
    version = re.search(r'data-version="([^"]+)"', page).group(1)
    unchanged = client.get("/today/live", headers={"If-None-Match": f'"{version}"'})
    assert unchanged.status_code == 304
    make_proposal("A new update")
    changed = client.get("/today/live", headers={"If-None-Match": f'"{version}"'})
    assert changed.status_code == 200 and "A new update" in changed.text


@pytest.mark.parametrize("change", ["todo", "pod_progress", "pod_started", "pod_ended", "yesterday_entry", "idea_card",
                                    "idea_discarded"])
def test_every_section_moves_the_version(app, client, owner, make_experiment, make_ideas, change):
    number = make_experiment("Watched", status="running")
    with app.app_context():
        db.session.add(Pod(experiment_id=experiments.get_experiment(number).id, account="team", name="pod-v",
                           status="running", cost_per_hr=1.0))
        db.session.commit()
    session_number, (card_id,) = make_ideas(["Ablate the order"])
    from services.planning import today
    with app.test_request_context():
        before = today.version()
        if change == "idea_card":
            ideation.add_card(ideation.get_session(session_number), "Another idea", "", origin="claude")
        elif change == "idea_discarded":
            session = ideation.get_session(session_number)
            assert ideation.discard(ideation.get_card(session, card_id))
        elif change == "todo":
            todos.create_todo({"title": "New"}, OWNER)
        elif change == "pod_progress":
            db.session.execute(sa.update(Pod).values(progress_pct=50, updated_at=clock.utcnow()))
        elif change == "pod_started":
            db.session.add(Pod(experiment_id=experiments.get_experiment(number).id, account="team", name="pod-w",
                               status="deploying", cost_per_hr=1.0))
        elif change == "pod_ended":
            # Stamped a minute back: the watch must see the pod leave, not just a newer stamp.
            db.session.execute(sa.update(Pod).values(status="exited", ended_at=clock.utcnow(),
                                                     updated_at=clock.utcnow() - timedelta(minutes=1)))
        else:
            daily_log.write(daily_log.today() - timedelta(days=1), "scheduler")
        db.session.commit()
        assert today.version() != before


def test_a_change_landing_while_today_renders_is_shown_by_the_next_poll(app, client, owner, make_proposal,
                                                                         monkeypatch):
    """A belief update proposed after the queue's belief updates were read but before the page
    is done: the page does not list it, so its version must not count it either (the version
    is read before the sections), and the next poll brings it."""
    from services.planning import today
    landed = []

    def propose_meanwhile():
        if not landed:
            landed.append(make_proposal("Proposed while the page rendered"))  # its own session, committed
        return []
    monkeypatch.setitem(today.SOURCES, "meanwhile", today.NeedSource("meanwhile", propose_meanwhile))
    page = client.get("/").text
    assert landed and "Proposed while the page rendered" not in page
    version = re.search(r'data-version="([^"]+)"', page).group(1)
    polled = client.get("/today/live", headers={"If-None-Match": f'"{version}"'})
    assert polled.status_code == 200 and "Proposed while the page rendered" in polled.text


@pytest.mark.parametrize("removed", ["question", "failed_email"])
def test_removing_what_today_shows_moves_the_version(app, client, owner, make_experiment, removed):
    """A removed row moves no table's newest stamp: the two kinds of row Today shows that can
    be removed (an @claude question whose reply failed, deleted from its thread; a failed
    email, dismissed) still move the version. A newer row of the same table, written after
    the removed one, keeps the table's newest stamp where it was: only the count can tell."""
    from models.result import Comment
    from services.planning import discussion, today
    from services.workflow import email_notify
    number = make_experiment("Questions asked")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        if removed == "question":
            run = runs_service.create_run(kind="qa", agent="qa", request="Is the gap noise?", status="failed")
            db.session.flush()
            gone = Comment(entity_kind="experiment", entity_id=experiment.id, author_kind="owner", author_name="o",
                           body_md="@claude is the gap noise?", body_html="<p>@claude is the gap noise?</p>",
                           qa_run_id=run.id)
            newer = Comment(entity_kind="experiment", entity_id=experiment.id, author_kind="owner", author_name="o",
                            body_md="A note.", body_html="<p>A note.</p>")
        else:
            gone = NotificationEmail(kind="failure", subject="Failed: #1", body_text="x", body_html="<p>x</p>",
                                     status="failed", attempts=3, last_error="550 mailbox unavailable")
            newer = NotificationEmail(kind="result_ready", subject="Ready: #1", body_text="x", body_html="<p>x</p>",
                                      status="sent", attempts=1)
        db.session.add(gone)
        db.session.commit()
        newer.updated_at = gone.updated_at + timedelta(minutes=1)
        db.session.add(newer)
        db.session.commit()
        gone_id = gone.id
    with app.test_request_context():
        before = today.version()
        if removed == "question":
            discussion.delete_comment(db.session.get(Comment, gone_id), OWNER)
        else:
            email_notify.dismiss_failed(gone_id)
        db.session.commit()
        assert today.version() != before


def test_each_watched_table_finds_its_newest_change_on_an_index():
    """The poll reads every watched table's newest `updated_at` on each call: on an index,
    that is one probe whatever the table's size (a table without one is scanned whole). Pods
    are watched among the unfinished, on their status index, and have no such index: every
    progress post rewrites a pod's row, in place only while no indexed column changes."""
    from services.planning import today
    among = today._watched_among()
    for model in today._WATCHED:
        indexed = [[column.name for column in index.columns] for index in model.__table__.indexes]
        if model in among:
            assert ["updated_at"] not in indexed and ["status"] in indexed, model.__tablename__
        else:
            assert ["updated_at"] in indexed, model.__tablename__


def _queries(client, path, headers=None) -> int:
    with counting_queries() as statements:
        response = client.get(path, headers=headers or {})
    assert response.status_code in (200, 304)
    return len(statements)


def test_today_and_its_poll_run_a_constant_number_of_queries(app, client, owner, make_experiment, make_proposal,
                                                             make_ideas):
    def fill(n):
        for i in range(n):
            make_ideas([f"Idea {i}a", f"Idea {i}b"], belief_title=f"Ideas belief {i}")
            make_experiment(f"Plan {i}", status="plan_pending")
            make_experiment(f"Ask {i}", status="awaiting_clarifications")
            make_experiment(f"Run {i}", status="running")
            make_experiment(f"Blocked {i}", status="blocked")
            make_proposal(f"Belief {i}")
            with app.app_context():
                # Agent runs of every classification: the Spend section's split reads them.
                for classification in registry.RUN_CLASSIFICATIONS:
                    run = runs_service.create_run(kind="apply", agent="analyzer", request="Work.", scope_id=None)
                    run.cost_usd, run.classification = 0.5, classification
                db.session.commit()
    fill(1)
    client.get("/")
    few = _queries(client, "/")
    version = re.search(r'data-version="([^"]+)"', client.get("/").text).group(1)
    poll_few = _queries(client, "/today/live", {"If-None-Match": f'"{version}"'})
    fill(4)
    many = _queries(client, "/")
    version = re.search(r'data-version="([^"]+)"', client.get("/").text).group(1)
    poll_many = _queries(client, "/today/live", {"If-None-Match": f'"{version}"'})
    assert few == many, (few, many)
    # The quiet-polls layer answers the unchanged poll: one statement (the fingerprint beside
    # the session's version), no Flask request.
    assert poll_few == poll_many == 1, (poll_few, poll_many)


# --- todos follow their experiment -----------------------------------------------------------

def test_every_experiment_status_maps_to_a_todo_status():
    assert set(todos.TODO_STATUS_OF_EXPERIMENT) == set(registry.STATUS_NAMES)
    assert set(todos.TODO_STATUS_OF_EXPERIMENT.values()) <= set(registry.TODO_STATUSES)


def test_a_todo_moves_with_its_experiment(app, client, owner):
    with app.app_context():
        todo = todos.create_todo({"title": "Probe the residual stream"}, OWNER)
        experiment, _made = todos.make_experiment(todo, OWNER)
        db.session.commit()
        todo_id, number = todo.id, experiment.number

    def todo_status():
        with app.app_context():
            return db.session.get(Todo, todo_id).status

    assert todo_status() == "planning"
    from services.pipeline import demo
    seen = []
    for status in ("running", "awaiting_promotion", "blocked"):
        with app.app_context():
            experiment = experiments.get_experiment(number)
            if status == "blocked":
                lifecycle.transition(experiment, "blocked", OWNER, note="GPU quota")
            else:
                demo.walk_to(experiment, status)
            db.session.commit()
        seen.append(todo_status())
    assert seen == ["running", "awaiting_promotion", "blocked"]
    with app.app_context():
        lifecycle.transition(experiments.get_experiment(number), "cancelled", OWNER, note="Dropped")
        db.session.commit()
    assert todo_status() == "cancelled"


def test_an_archived_todo_stays_archived(app):
    with app.app_context():
        todo = todos.create_todo({"title": "Shelved"}, OWNER)
        experiment, _made = todos.make_experiment(todo, OWNER)
        todo.status = "archived"
        db.session.commit()
        lifecycle.transition(experiment, "blocked", OWNER, note="wait")
        db.session.commit()
        db.session.expire_all()
        assert db.session.get(Todo, todo.id).status == "archived"


def test_today_works_on_sqlite(tmp_path):
    """The embedded default (SQLite): Today renders every section, approves in place and polls."""
    import flask_migrate

    from services.core.auth import create_owner
    from services.pipeline import demo
    from tests.conftest import OWNER_EMAIL, OWNER_PASSWORD
    from tests.integration.test_migrations import MIGRATIONS, _scratch_app

    app = _scratch_app(f"sqlite:///{tmp_path / 'sagan.db'}")
    try:
        with app.app_context():
            flask_migrate.upgrade(directory=MIGRATIONS)
            create_owner(OWNER_EMAIL, OWNER_PASSWORD)
            for title, status in (("Lite plan", "plan_pending"), ("Lite question", "awaiting_clarifications"),
                                  ("Lite run", "running")):
                experiment = experiments.create_experiment({"title": title}, OWNER)
                demo.walk_to(experiment, status)
            belief = beliefs.create_belief({"title": "Lite belief", "status": "active", "next_test": "Try it."}, OWNER)
            beliefs.propose_update(belief, None, None, status="supported", confidence="LOW", text="Holds.",
                                   evidence="One run.", reasoning="It held once.")
            session = ideation.start_session("belief", belief.id, OWNER)
            ideation.add_card(session, "Lite idea", "", origin="claude")
            db.session.commit()
            approval = str(db.session.scalar(sa.select(ApprovalRequest.id).where(ApprovalRequest.status == "pending")))
        client = app.test_client()
        page = client.get("/login")
        client.post("/login", data={"email": OWNER_EMAIL, "password": OWNER_PASSWORD,
                                    "csrf_token": csrf_from(page.text)})
        html = client.get("/").text
        for shown in ("Lite plan", "Lite question", "Lite run", "Lite belief", "Try it.", "Lite idea"):
            assert shown in html, shown
        version = re.search(r'data-version="([^"]+)"', html).group(1)
        assert client.get("/today/live", headers={"If-None-Match": f'"{version}"'}).status_code == 304
        answer = client.post(f"/today/plan/{approval}", headers={"HX-Request": "true"},
                             data={"action": "approve", "confirm_unchecked": "1", "csrf_token": csrf_from(html)})
        assert "Approved" in answer.text
        assert client.get("/today/live", headers={"If-None-Match": f'"{version}"'}).status_code == 200
    finally:
        with app.app_context():
            db.session.remove()
            db.engine.dispose()


def test_quiet_poll_never_answers_a_stale_session(app, client, owner):
    """After "log out everywhere" (the session version moves), the unchanged poll is not
    answered 304 by the quiet layer: Flask's own check sends the stale session to log in."""
    from models import User
    version = re.search(r'data-version="([^"]+)"', client.get("/").text).group(1)
    headers = {"If-None-Match": f'"{version}"'}
    assert client.get("/today/live", headers=headers).status_code == 304
    with app.app_context():
        db.session.execute(sa.update(User).values(session_version=User.session_version + 1))
        db.session.commit()
    assert client.get("/today/live", headers=headers).status_code == 302


def test_a_failed_reply_is_asked_again_from_the_queue(app, htmx_client, make_experiment, fake_anthropic, worker):
    """An @claude question whose run failed waits in the queue; "Ask Claude again" asks once
    (a second tap is refused: nothing to retry) and the reply lands in the thread."""
    from models import AgentRun
    from models.result import Comment
    from tests.fakes.anthropic_server import error, reply, text, tool_use
    number = make_experiment("Probe")
    fake_anthropic.script(error(400, "invalid_request_error", "prompt is too long"))
    htmx_client.post(f"/experiments/{number}/comments", headers={"X-CSRFToken": htmx_client.csrf},
                     data={"body": "@claude is the gap noise?"})
    worker()
    with app.app_context():
        question = str(db.session.scalar(sa.select(Comment.id)))
        asked_before = db.session.scalar(sa.select(sa.func.count(AgentRun.id)).where(AgentRun.kind == "qa"))
    assert f'id="need-failed_reply-{question}"' in htmx_client.get("/", headers={"HX-Request": "false"}).text
    fake_anthropic.script(reply(tool_use("add_comment", {"body": "The gap is within the seed spread."})),
                          reply(text("Done.")))
    asked = htmx_client.post(f"/today/failed_reply/{question}", data={"action": "retry"},
                             headers={"X-CSRFToken": htmx_client.csrf})
    assert "Asked again" in asked.text
    again = htmx_client.post(f"/today/failed_reply/{question}", data={"action": "retry"},
                             headers={"X-CSRFToken": htmx_client.csrf})
    assert again.status_code == 200 and "nothing to retry" in again.text
    with app.app_context():
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id)).where(AgentRun.kind == "qa")) \
            == asked_before + 1
    worker()
    assert "The gap is within the seed spread." in htmx_client.get(f"/experiments/{number}/comments").text
    assert f"need-failed_reply-{question}" not in htmx_client.get("/", headers={"HX-Request": "false"}).text


# --- the weekly review and failed emails join the queue ---------------------------------------

def _version_of_today(client) -> str:
    return re.search(r'data-version="([^"]+)"', client.get("/").text).group(1)


def test_a_drafted_review_waits_on_today_until_it_is_published(app, client, owner):
    before = _version_of_today(client)
    week = date(2026, 11, 22)
    with app.app_context():
        review, _ = weekly_review.draft(week, "scheduler")
        db.session.commit()
    page = client.get("/").text
    assert 'id="need-weekly_review-2026-11-22"' in page and 'href="/reviews/2026-11-22"' in page
    assert _version_of_today(client) != before
    assert client.get("/reviews/2026-11-22").status_code == 200  # the row's link opens the review

    with app.app_context():
        review = weekly_review.by_week(week)
        weekly_review.publish(review, weekly_review.latest(review).version, OWNER)
        db.session.commit()
    assert 'need-weekly_review-' not in client.get("/").text


def test_an_email_that_could_not_be_sent_waits_on_today(app, client, owner):
    with app.app_context():
        db.session.add(NotificationEmail(kind="failure", subject="Failed or blocked: #7 Sweep", body_text="x",
                                         body_html="<p>x</p>", status="failed", attempts=3,
                                         last_error="550 mailbox unavailable"))
        db.session.commit()
    page = client.get("/").text
    assert "Failed or blocked: #7 Sweep" in page and "550 mailbox unavailable" in page
    assert 'href="/settings#email"' in page
