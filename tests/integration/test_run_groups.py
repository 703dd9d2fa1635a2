"""Runs told apart and grouped by configuration: chart lines name their run, attempt and
commit (a crashed run and its fixed rerun differ), carry the run's configuration — from the
pod spec's env and from the metrics helper — for the "Group by" choice, and the cost panel
and the compare view say what was spent in words, local pods as no charge."""
from __future__ import annotations

import json
import re
import uuid

import pytest
import sqlalchemy as sa

from models import AgentRun, Experiment, PlanVersion, Pod, db
from services.dispatch import metrics, run_config, tokens
from services.workflow import runs


def _experiment(number) -> Experiment:
    return db.session.scalar(sa.select(Experiment).where(Experiment.number == number))


def _pod(experiment, index, *, commit=None, config=None, name=None, account="local"):
    run = runs.create_run(kind="apply", agent="bench", request="d", scope_id=experiment.id, status="waiting")
    secret, digest = tokens.new_token()
    meta = {"commit": commit, "config": config or {}}
    pod = Pod(id=uuid.uuid4(), agent_run_id=run.id, experiment_id=experiment.id, account=account, run_index=index,
              name=name or f"sagan-{experiment.number}-{run.id.hex[:8]}-{index}-1", status="running",
              progress_token_hash=digest, metadata_=meta)
    db.session.add(pod)
    db.session.flush()
    return pod, secret


def _loss(pod, values, seq=1):
    batch = metrics.parse_batch({"seq": seq, "points": [{"step": s, "name": "loss", "value": v}
                                                        for s, v in enumerate(values)]})
    assert metrics.record_batch(pod, batch)


def test_a_crashed_run_and_its_fixed_rerun_are_told_apart(app, owner, client, make_experiment):
    """Do two dispatches of run 0 read "run 0 · <commit>" with different commits, and two of
    one commit add their pod's name, so no two lines share a label?"""
    number = make_experiment("Rerun", status="running")
    with app.app_context():
        experiment = _experiment(number)
        crashed, _ = _pod(experiment, 0, commit="a1b2c3d4e5f6")
        fixed, _ = _pod(experiment, 0, commit="0f9e8d7c6b5a")
        again, _ = _pod(experiment, 0, commit="0f9e8d7c6b5a", name="sagan-rerun-again")
        for seq, pod in enumerate((crashed, fixed, again), start=1):
            _loss(pod, [1.0, 0.5], seq=seq)
        fixed_name = fixed.name
        db.session.commit()
    body = client.get(f"/experiments/{number}/metrics/data?name=loss").get_json()
    labels = [line["label"] for line in body["series"]]
    assert labels[0] == "run 0 · a1b2c3d"
    assert set(labels[1:]) == {f"run 0 · 0f9e8d7 · {n}" for n in ("sagan-rerun-again", fixed_name)}
    assert len(set(labels)) == 3 and {line["commit"] for line in body["series"]} == {"a1b2c3d4e5f6", "0f9e8d7c6b5a"}


def test_the_chart_data_carries_each_runs_configuration(app, owner, client, make_experiment):
    """Does each line carry its run index and the configuration the spec's env gave it, with
    what the metrics helper posted merged over it (the script's keys win)?"""
    number = make_experiment("Grouped", status="running")
    with app.app_context():
        experiment = _experiment(number)
        spec = {"env": {"SEED": "1", "LR": "3e-4", "CONDITION": "wide", "SAGAN_GIT_COMMIT": "abc",
                        "HF_TOKEN_NAME": "x"}}
        first, secret = _pod(experiment, 0, config=run_config.from_spec(spec))
        second, _ = _pod(experiment, 1, config=run_config.from_spec({"env": {"SEED": "2", "CONDITION": "wide"}}))
        _loss(first, [1.0, 0.8])
        _loss(second, [1.2, 0.7], seq=2)
        db.session.commit()
    answer = client.post("/api/metrics/config", data=json.dumps({"config": {"seed": 7, "Dropout": 0.1}}),
                         headers={"Authorization": f"Bearer {secret}", "Content-Type": "application/json"})
    assert answer.status_code == 200
    assert answer.get_json()["config"] == {"seed": 7, "lr": 0.0003, "condition": "wide", "dropout": 0.1}
    series = client.get(f"/experiments/{number}/metrics/data?name=loss").get_json()["series"]
    assert [line["config"] for line in series] == [
        {"run": 0, "seed": 7, "lr": 0.0003, "condition": "wide", "dropout": 0.1},
        {"run": 1, "seed": 2, "condition": "wide"}]


@pytest.mark.parametrize("body, words", [
    ({"config": {}}, "1–24 keys"),
    ({"config": {"seed": [1, 2]}}, "config.seed must be a number or text"),
    ({"config": {"note": "x" * 81}}, "at most 80 characters"),
    ({"seed": 1}, 'The body must be {"config"'),
    ({"config": {"k" * 41: 1}}, "1–40 characters"),
])
def test_a_bad_configuration_is_refused_and_changes_nothing(app, make_live_pod, client, body, words):
    """Is each malformed configuration a 400 that names the problem, with the pod's stored
    configuration untouched?"""
    pod = make_live_pod("Bad config")
    answer = client.post("/api/metrics/config", data=json.dumps(body),
                         headers={"Authorization": f"Bearer {pod.secret}", "Content-Type": "application/json"})
    assert answer.status_code == 400 and words in answer.get_json()["message"]
    with app.app_context():
        assert (db.session.get(Pod, pod.id).metadata_ or {}).get("config") is None


def test_the_config_post_needs_the_pods_token(make_live_pod, client):
    make_live_pod("Token")
    answer = client.post("/api/metrics/config", data=json.dumps({"config": {"seed": 1}}),
                         headers={"Authorization": "Bearer spt_nope", "Content-Type": "application/json"})
    assert answer.status_code == 401


def test_the_panels_offer_group_by_and_the_compare_view_preselects_it(app, owner, client, make_experiment):
    """Do the experiment page and the compare view have the Group by and Spread choices, with
    `?group=seed` handed to the script?"""
    number = make_experiment("Group page", status="running")
    with app.app_context():
        pod, _ = _pod(_experiment(number), 0, config={"seed": 1})
        _loss(pod, [1.0])
        db.session.commit()
    page = client.get(f"/experiments/{number}").get_data(as_text=True)
    assert "data-metric-group" in page and "data-metric-spread" in page
    compare = client.get(f"/experiments/compare?e={number}&group=seed").get_data(as_text=True)
    assert 'data-metric-group data-initial="seed"' in compare


def _section(page: str, marker: str) -> str:
    part = page[page.index(marker):]
    return part[:part.index("</section>")]


def test_local_pods_are_no_charge_and_unknown_prices_say_why(app, owner, client, make_experiment):
    """With local pods and a run of a model without a price, does the cost panel say "no
    charge" for GPUs and why the price is unknown — never "$0.00 + price unknown" nor
    "price unknown of $0.00" — and the compare view too?"""
    number = make_experiment("Local and unpriced", status="running")
    with app.app_context():
        experiment = _experiment(number)
        _pod(experiment, 0)
        unpriced = AgentRun(id=uuid.uuid4(), kind="apply", agent="code-writer", request="r", scope_id=experiment.id,
                            status="completed", model="claude-unreleased-9", input_tokens=10, output_tokens=5)
        db.session.add(unpriced)
        db.session.flush()
        unpriced.cost_usd = None  # as the agent loop stores a run of a model without a price
        db.session.add(PlanVersion(experiment_id=experiment.id, version=99, markdown="p", source="agent",
                                   estimate={"total_usd": 0.0, "known_usd": 0.0, "unknown_prices": []}))
        db.session.commit()
    cost = _section(client.get(f"/experiments/{number}").get_data(as_text=True), 'id="cost"')
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", cost))
    assert "no charge (local pod: it runs on this machine)" in text
    assert "Not known: 1 agent run used a model without a price." in text
    assert "The plan expected no GPU charge (its pods run on this machine); none so far." in text
    assert "$0.00 + price unknown" not in text and "of $0.00" not in text
    compare = client.get(f"/experiments/compare?e={number}").get_data(as_text=True)
    row = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", compare[compare.index(f"#{number}"):]))
    assert "price unknown 1 agent run used a model without a price" in row and "$0.00 + price unknown" not in row


def test_a_priced_spend_reads_as_a_sentence_against_the_estimate(app, owner, client, make_experiment):
    """Does a $0.69/h pod up two hours against a $5.00 estimate read "$1.38 …" and "GPUs have
    cost $1.38 of the $5.00 the plan estimated (28%)"?"""
    number = make_experiment("Priced", status="running")
    with app.app_context():
        experiment = _experiment(number)
        db.session.add(Pod(id=uuid.uuid4(), experiment_id=experiment.id, account="team", name="p-priced",
                           status="running", cost_per_hr=0.69, uptime_seconds=7200))
        db.session.add(PlanVersion(experiment_id=experiment.id, version=99, markdown="p", source="agent",
                                   estimate={"total_usd": 5.0, "known_usd": 5.0, "unknown_prices": []}))
        db.session.commit()
    cost = _section(client.get(f"/experiments/{number}").get_data(as_text=True), 'id="cost"')
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", cost))
    assert "$1.38: no agent runs yet, $1.38 on GPUs." in text
    assert "GPUs have cost $1.38 of the $5.00 the plan estimated (28%)." in text


def test_the_demos_screens_carry_seeds_to_group_by(app, owner, client):
    """Do the curated demo's two finished screens each draw six runs — three seeds under two
    conditions — whose configurations give each seed four runs across both?"""
    from services.pipeline import demo
    with app.app_context():
        demo.load_curated()
        numbers = list(db.session.scalars(sa.select(Experiment.number).where(
            Experiment.status.in_(("interpreting", "awaiting_promotion"))).order_by(Experiment.number)))
    seeds: dict = {}
    for number in numbers:
        series = client.get(f"/experiments/{number}/metrics/data?name=loss").get_json()["series"]
        assert len(series) == 6 and len({line["label"] for line in series}) == 6
        for line in series:
            seeds.setdefault(line["config"]["seed"], []).append(line)
    assert sorted(seeds) == [0, 1, 2] and all(len(lines) == 4 for lines in seeds.values())
