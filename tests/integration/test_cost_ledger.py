"""The cost ledger: estimate versus actual, agent tokens and GPU time, burn rate, "price
unknown" (never $0.00), on the experiment page and the board cards."""
from __future__ import annotations

import re
import uuid

import pytest
import sqlalchemy as sa

from models import AgentRun, Experiment, PlanVersion, Pod, db
from services.dispatch import cost_ledger


def _experiment(number) -> Experiment:
    return db.session.scalar(sa.select(Experiment).where(Experiment.number == number))


def _run(experiment, *, model, cost, tokens=1000, kind="apply"):
    run = AgentRun(id=uuid.uuid4(), kind=kind, agent="code-writer", request="r", scope_id=experiment.id,
                   status="completed", model=model, cost_usd=cost, input_tokens=tokens, output_tokens=tokens // 2)
    db.session.add(run)
    if cost is None:  # as the loop does: a run starts at 0 and its first unpriced call makes it NULL
        db.session.flush()
        run.cost_usd = None
    return run


def _next_version(experiment) -> int:
    """The plan version after the ones make_experiment's walk already wrote."""
    return (db.session.scalar(sa.select(sa.func.max(PlanVersion.version))
                              .where(PlanVersion.experiment_id == experiment.id)) or 0) + 1


def _pod(experiment, *, rate, uptime, status="running", account="team"):
    pod = Pod(id=uuid.uuid4(), experiment_id=experiment.id, account=account, name=f"p-{uuid.uuid4().hex[:8]}",
              status=status, cost_per_hr=rate, uptime_seconds=uptime)
    db.session.add(pod)
    return pod


@pytest.fixture
def costed(app, make_experiment):
    """Two priced agent runs, a running $0.69/h pod up two hours, a plan estimating $5.00."""
    number = make_experiment("Costed", status="running")
    with app.app_context():
        experiment = _experiment(number)
        _run(experiment, model="claude-sonnet-5-5", cost=0.25)
        _run(experiment, model="claude-haiku-4-5", cost=0.05)
        _pod(experiment, rate=0.69, uptime=7200)
        db.session.add(PlanVersion(experiment_id=experiment.id, version=_next_version(experiment), markdown="p", source="agent",
                                   estimate={"total_usd": 5.0, "known_usd": 5.0, "unknown_prices": []}))
        db.session.commit()
    return number


def test_the_ledger_splits_agents_and_gpu_against_the_estimate(app, costed):
    with app.test_request_context():
        ledger = cost_ledger.ledger_for(_experiment(costed))
    assert ledger.agents_usd == pytest.approx(0.30) and ledger.agent_runs == 2 and ledger.agent_tokens == 3000
    assert ledger.gpu_usd == pytest.approx(1.38) and ledger.burn_usd_per_hour == pytest.approx(0.69)
    assert ledger.pods_running == 1 and ledger.estimate_usd == 5.0
    assert ledger.total_usd == pytest.approx(1.68) and not ledger.price_unknown and not ledger.over_estimate


def test_the_page_shows_estimate_actual_and_burn_rate(owner, client, costed):
    page = client.get(f"/experiments/{costed}").get_data(as_text=True)
    ledger = page[page.index('id="cost"'):]
    ledger = ledger[:ledger.index("</section>")]
    assert "$5.00" in ledger and "$0.30" in ledger and "$1.38" in ledger and "$0.69/h" in ledger
    assert "$1.68" in ledger and "price unknown" not in ledger


def test_an_unpriced_model_and_pod_say_price_unknown_never_zero(app, owner, client, make_experiment):
    """A run of a model without a price (cost 0 recorded) and a RunPod pod without a rate:
    "price unknown" on the page and the card; a local pod (no bill) is not unknown."""
    number = make_experiment("Unpriced", status="running")
    with app.app_context():
        experiment = _experiment(number)
        _run(experiment, model="claude-unreleased-9", cost=None)  # the loop stores NULL for an unpriced model
        _pod(experiment, rate=None, uptime=600)
        _pod(experiment, rate=None, uptime=600, account="local", status="exited")
        db.session.commit()
    with app.test_request_context():
        ledger = cost_ledger.ledger_for(_experiment(number))
    assert ledger.agents_unpriced == 1 and ledger.gpu_unpriced == 1 and ledger.price_unknown
    page = client.get(f"/experiments/{number}").get_data(as_text=True)
    section = page[page.index('id="cost"'):]
    section = section[:section.index("</section>")]
    assert section.count("price unknown") >= 3
    assert not re.search(r"\$0\.00/h", section)
    board = client.get("/board").get_data(as_text=True)
    card = board[board.index(f'id="card-{number}"'):]
    card = card[:card.index("</article>")]
    assert "price unknown" in card and "$0.00/h" not in card


def test_over_the_estimate_is_flagged(app, owner, client, make_experiment):
    number = make_experiment("Over", status="running")
    with app.app_context():
        experiment = _experiment(number)
        _pod(experiment, rate=2.0, uptime=3 * 3600)
        db.session.add(PlanVersion(experiment_id=experiment.id, version=_next_version(experiment), markdown="p", source="agent",
                                   estimate={"total_usd": 4.0, "known_usd": 4.0, "unknown_prices": []}))
        db.session.commit()
    page = client.get(f"/experiments/{number}").get_data(as_text=True)
    assert "over the estimate" in page


def test_an_estimate_with_unknown_prices_says_so(app, owner, client, make_experiment):
    number = make_experiment("Partly priced")
    with app.app_context():
        db.session.add(PlanVersion(experiment_id=_experiment(number).id, version=_next_version(_experiment(number)), markdown="p", source="agent",
                                   estimate={"total_usd": None, "known_usd": 1.5, "unknown_prices": ["B300"]}))
        db.session.commit()
    section = client.get(f"/experiments/{number}").get_data(as_text=True)
    section = section[section.index('id="cost"'):]
    assert "price unknown</span> for B300" in section and "$1.50 known" in section


def test_board_cards_show_spend_and_burn(owner, client, costed):
    board = client.get("/board").get_data(as_text=True)
    card = board[board.index(f'id="card-{costed}"'):]
    card = card[:card.index("</article>")]
    assert "card-spend" in card and "$1.68" in card and "$0.69/h" in card


def test_a_tiny_real_spend_is_not_shown_as_zero(app, owner, client, make_experiment):
    number = make_experiment("Cheap")
    with app.app_context():
        _run(_experiment(number), model="claude-haiku-5-5", cost=0.0042)
        db.session.commit()
    page = client.get(f"/experiments/{number}").get_data(as_text=True)
    assert "$0.0042" in page


def test_the_ledger_is_a_constant_number_of_queries(app, make_experiment):
    """Three queries for one experiment or twenty (the board's cards)."""
    from sqlalchemy import event
    numbers = [make_experiment(f"E{i}") for i in range(20)]
    with app.test_request_context():
        chosen = [_experiment(n) for n in numbers]
        for experiment in chosen:
            _run(experiment, model="claude-sonnet-5-5", cost=0.1)
            _pod(experiment, rate=1.0, uptime=60)
        db.session.commit()
        chosen = list(db.session.scalars(sa.select(Experiment).where(Experiment.number.in_(numbers))))
        counts = []
        for subset in (chosen[:1], chosen):
            seen = []
            listener = lambda *_args, seen=seen: seen.append(1)  # noqa: E731
            event.listen(db.engine, "before_cursor_execute", listener)
            try:
                ledgers = cost_ledger.ledgers_for(subset)
            finally:
                event.remove(db.engine, "before_cursor_execute", listener)
            counts.append(len(seen))
        assert len(ledgers) == 20 and all(ledger.agent_runs == 1 for ledger in ledgers.values())
    assert counts == [3, 3]


def test_a_card_says_nothing_of_money_when_nothing_costs_any(app, owner, client, make_experiment):
    """A local pod bills nothing: its card showed "$0.00 · $0.00/h". With an agent's spend
    beside it, the card shows that spend and no burn rate."""
    free, partly = make_experiment("Local only", status="running"), make_experiment("Local and agents", status="running")
    with app.app_context():
        _pod(_experiment(free), rate=None, uptime=600, account="local")
        _pod(_experiment(partly), rate=None, uptime=600, account="local")
        _run(_experiment(partly), model="claude-haiku-4-5", cost=0.12)
        db.session.commit()
    board = client.get("/board").get_data(as_text=True)

    def card(number):
        html = board[board.index(f'id="card-{number}"'):]
        return html[:html.index("</article>")]

    assert "card-spend" not in card(free) and "$0.00" not in card(free)
    spend = re.search(r'<span class="card-spend"[^>]*>(.*?)</span>', card(partly)).group(1)
    assert spend == "$0.12"  # no " · $0.00/h" for the local pod


def test_compare_says_a_local_plan_bills_nothing_rather_than_zero_dollars(app, owner, client, make_experiment):
    """Does the compare view's GPU estimate for a plan whose pods all run on this machine read
    "no charge (local pods)", and a priced RunPod plan its dollars?"""
    local, paid = make_experiment("Local plan"), make_experiment("Paid plan")
    with app.app_context():
        for number, estimate in ((local, {"total_usd": 0.0, "known_usd": 0.0, "unknown_prices": [],
                                          "accounts": ["local"]}),
                                 (paid, {"total_usd": 4.2, "known_usd": 4.2, "unknown_prices": [],
                                         "accounts": ["team"]})):
            experiment = _experiment(number)
            db.session.add(PlanVersion(experiment_id=experiment.id, version=_next_version(experiment), markdown="p",
                                       source="agent", estimate=estimate))
        db.session.commit()
    page = client.get(f"/experiments/compare?e={local}&e={paid}").get_data(as_text=True)
    rows = {number: page.split(f">#{number}</a>", 1)[1].split("</tr>", 1)[0] for number in (local, paid)}
    # The cells after the status: what was spent, then the GPU estimate.
    estimate = {number: re.findall(r'<td class="num nowrap">(.*?)</td>', row, re.S)[1] for number, row in rows.items()}
    assert "no charge (local pods)" in estimate[local] and "$" not in estimate[local]
    assert "$4.20" in estimate[paid] and "no charge" not in estimate[paid]
