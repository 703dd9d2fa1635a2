"""The saga follows RunPod's table of create failures ("Create a pod", API reference v2, read
2026-12-02; docs/pods.md), one test per row, against the loopback fake that answers like
the service: 402 gives up the account, 403 skips the candidate, 422 is never retried nor
tried elsewhere, capacity (a 400 known by its detail) moves on, a 400 from every candidate
is read as the request's problem, a 5xx is looked up by name and then retried on the same
candidate. Each refusal says on the run's timeline which rule applied."""
from __future__ import annotations

import sqlalchemy as sa

from models import AgentRun, Pod, RunEvent, db
from services.workflow import experiments
from tests.integration import test_dispatch as base
from tests.integration.test_dispatch import A100, H100, dispatch, pod_spec, run_events

runpod = base.runpod
approved = base.approved
TWO_GPUS = {"gpuType": {"allowed": ["A100", "H100"]}}


def creates(fake):
    return [(r.body["gpu"]["id"], r.status) for r in fake.requests_to("POST")
            if r.path.rstrip("/") == "/v2/pods" and r.body]


def refusals(run_id) -> list[dict]:
    """The pod_create_refused events: the rule, its status and what followed, in order."""
    return [{**e.metadata_, "body": e.body} for e in db.session.scalars(sa.select(RunEvent).where(
        RunEvent.run_id == run_id, RunEvent.event_type == "pod_create_refused").order_by(RunEvent.seq))]


def outcome(run_id) -> tuple[str, str, str | None]:
    run = db.session.get(AgentRun, run_id)
    return run.status, run.failure_reason, run.last_error


def pods(run_id) -> list[tuple[str, str, int]]:
    return [(p.gpu_type_id, p.status, p.attempt) for p in db.session.scalars(
        sa.select(Pod).where(Pod.agent_run_id == run_id).order_by(Pod.attempt))]


def test_402_no_balance_stops_the_account_at_once(app, runpod, approved):
    """402: no other candidate on the account can succeed. One create, no H100 tried; the dispatch
    fails provider_balance (never recovered automatically) and the timeline names the rule."""
    runpod.no_balance()
    number = approved(pod_spec(substitution_policy=TWO_GPUS))
    run_id = dispatch(app, number)
    assert creates(runpod) == [(A100, 402)]
    with app.app_context():
        status, reason, error = outcome(run_id)
        assert (status, reason) == ("failed", "provider_balance")
        assert "insufficient balance (402): no other candidate on this account can succeed" in error
        assert [(r["rule"], r["status"], r["then"]) for r in refusals(run_id)] == [("no_balance", 402, "account")]
        assert run_events(run_id, "pod_substitution") == []
        assert experiments.get_experiment(number).status == "blocked"
        assert db.session.scalar(sa.select(sa.func.count(AgentRun.id)).where(AgentRun.resumes_run_id == run_id)) == 0


def test_402_on_one_account_still_tries_the_other_allowed_account(app, runpod, approved):
    """The balance is the account's: after the team's 402 its H100 is skipped, and the personal
    account the policy allows is tried and used."""
    runpod.no_balance(scope="team")
    number = approved(pod_spec(substitution_policy={**TWO_GPUS, "account": {"allowed": ["team", "personal"]}}))
    run_id = dispatch(app, number)
    assert creates(runpod) == [(A100, 402), (A100, 201)]
    with app.app_context():
        assert outcome(run_id)[0] == "waiting"
        made = db.session.scalar(sa.select(Pod).where(Pod.agent_run_id == run_id, Pod.status == "deploying"))
        assert (made.account, made.gpu_type_id) == ("personal", A100)
        assert "trying 1× A100 on SECURE (personal): insufficient balance (402)" in run_events(
            run_id, "pod_substitution")[0]


def test_403_no_access_to_the_pool_skips_the_candidate_and_keeps_going(app, runpod, approved):
    """403: the account cannot use that pool. The candidate is skipped and the next one is created
    (a 403 used to stop the whole list as refused credentials)."""
    runpod.no_pool_access(A100)
    number = approved(pod_spec(substitution_policy=TWO_GPUS))
    run_id = dispatch(app, number)
    assert creates(runpod) == [(A100, 403), (H100, 201)]
    with app.app_context():
        assert outcome(run_id)[0] == "waiting"
        assert pods(run_id) == [(A100, "failed", 1), (H100, "deploying", 2)]
        (refused,) = refusals(run_id)
        assert (refused["rule"], refused["status"], refused["then"]) == ("no_pool_access", 403, "next")
        assert "cannot use that pool (403): skip the candidate, keep going" in refused["body"]


def test_422_is_never_retried_and_no_other_candidate_is_tried(app, runpod, approved):
    """422: the body breaks RunPod's contract, and every candidate sends the same body (no field
    that differs between Sagan's candidates can fail the contract): one create, spec_invalid with
    RunPod's `errors`, the rule on the timeline (a 422 used to move on to the next GPU)."""
    runpod.fail_next(1, status=422, method="POST", title="Unprocessable Entity", detail="Request validation failed.",
                     errors=["$: missing property 'region'"])
    number = approved(pod_spec(substitution_policy=TWO_GPUS))
    run_id = dispatch(app, number)
    assert [r.status for r in runpod.requests_to("POST")] == [422]
    with app.app_context():
        status, reason, error = outcome(run_id)
        assert (status, reason) == ("failed", "spec_invalid")
        assert "never retried — every candidate sends the same body" in error and "missing property 'region'" in error
        assert [(r["rule"], r["then"]) for r in refusals(run_id)] == [("contract", "stop")]


def test_capacity_is_a_400_known_by_its_detail_and_moves_on(app, runpod, approved):
    """Capacity: a 400 whose only sign is its detail. The next candidate is tried."""
    runpod.no_capacity(A100)
    number = approved(pod_spec(substitution_policy=TWO_GPUS))
    run_id = dispatch(app, number)
    assert creates(runpod) == [(A100, 400), (H100, 201)]
    with app.app_context():
        (refused,) = refusals(run_id)
        assert (refused["rule"], refused["status"], refused["then"]) == ("capacity", 400, "next")
        assert "no longer any instances available" in refused["body"]


def test_every_candidate_refused_with_400_is_the_requests_problem(app, runpod, approved):
    """RunPod: "if every candidate returns 400, read the last detail as a problem with the request
    rather than as absent capacity". A100 has no capacity, H100 is refused by a rule: the dispatch
    fails spec_invalid with that rule's words (it used to say provider_capacity)."""
    runpod.no_capacity(A100)
    runpod.refuse_create(H100, "dataCenterIds: no listed data center hosts this GPU type")
    number = approved(pod_spec(substitution_policy=TWO_GPUS))
    run_id = dispatch(app, number)
    assert creates(runpod) == [(A100, 400), (H100, 400)]
    with app.app_context():
        status, reason, error = outcome(run_id)
        assert (status, reason) == ("failed", "spec_invalid")
        assert "no listed data center hosts this GPU type" in error
        assert [r["rule"] for r in refusals(run_id)] == ["capacity", "refused"]


def test_every_candidate_out_of_capacity_is_capacity(app, runpod, approved):
    """Every candidate refused for capacity: the dispatch says provider_capacity (recoverable)."""
    runpod.no_capacity(A100)
    runpod.no_capacity(H100)
    number = approved(pod_spec(substitution_policy=TWO_GPUS))
    run_id = dispatch(app, number)
    with app.app_context():
        assert outcome(run_id)[:2] == ("failed", "provider_capacity")


def test_a_5xx_is_looked_up_by_name_then_the_same_candidate_is_tried_again(app, runpod, approved):
    """5xx: the pod may exist. The saga waits out the listing lag and lists by name; nothing there,
    it tries the same candidate again (it used to move on to the next GPU)."""
    runpod.fail_next(1, status=503, method="POST", title="Service Unavailable", detail="upstream timeout")
    number = approved(pod_spec(substitution_policy=TWO_GPUS))
    run_id = dispatch(app, number)
    assert [r.status for r in runpod.requests_to("POST")] == [503, 201]
    assert [r.body["gpu"]["id"] for r in runpod.requests_to("POST")[1:]] == [A100]
    assert runpod.requests_to("GET", "/v2/pods")[0].query == {}  # the look-up by listing
    with app.app_context():
        assert pods(run_id) == [(A100, "failed", 1), (A100, "deploying", 2)]
        (refused,) = refusals(run_id)
        assert (refused["rule"], refused["status"], refused["then"]) == ("may_exist", 503, "retry")
        assert run_events(run_id, "pod_substitution") == []


def test_a_5xx_after_the_pod_was_made_adopts_it(app, runpod, approved):
    """5xx after the pod exists: found by name after the lag, adopted, never created twice."""
    runpod.fail_after_create(1)
    runpod.listing_lag = 20
    number = approved(pod_spec(substitution_policy=TWO_GPUS))
    run_id = dispatch(app, number)
    assert len(runpod.pods) == 1 and [r.status for r in runpod.requests_to("POST")] == [500]
    with app.app_context():
        (made,) = db.session.scalars(sa.select(Pod).where(Pod.agent_run_id == run_id)).all()
        assert (made.gpu_type_id, made.attempt, made.provider_pod_id) == (A100, 1, next(iter(runpod.pods)))
        assert made.status != "failed" and refusals(run_id) == []


def test_5xx_three_times_running_stops_the_list(app, runpod, approved):
    """Three creates of one candidate all 5xx and none made a pod: the upstream is unhealthy, and
    the list stops there (provider_error) instead of waiting out every candidate."""
    runpod.fail_next(3, status=502, method="POST", title="Bad Gateway", detail="upstream connect error")
    number = approved(pod_spec(substitution_policy=TWO_GPUS))
    run_id = dispatch(app, number)
    assert creates(runpod) == [(A100, 502)] * 3
    with app.app_context():
        status, reason, error = outcome(run_id)
        assert (status, reason) == ("failed", "provider_error") and "upstream looks unhealthy" in error
        assert [r["then"] for r in refusals(run_id)] == ["retry", "retry", "stop"]


def test_a_rate_limit_longer_than_sagan_waits_stops_the_list(app, runpod, approved):
    """429 with a reset beyond what Sagan waits (a daily quota): every other create would get the same,
    so the list stops at once."""
    runpod.rate_limit(2, reset=3600)  # the account's SSH keys are read first (and may fail), then the create
    number = approved(pod_spec(substitution_policy=TWO_GPUS))
    run_id = dispatch(app, number)
    assert [r.status for r in runpod.requests_to("POST")] == [429]
    with app.app_context():
        assert outcome(run_id)[:2] == ("failed", "provider_error")
        assert [(r["rule"], r["then"]) for r in refusals(run_id)] == [("rate_limited", "stop")]


def test_refused_credentials_on_the_asked_account_stop_the_list(app, runpod, approved, monkeypatch):
    """401 on the asked account: another GPU will not fix its key; one create, provider_auth."""
    monkeypatch.setitem(app.config, "RUNPOD_API_KEY_TEAM", "rpa_REVOKEDKEY000000000000")
    number = approved(pod_spec(substitution_policy=TWO_GPUS))
    run_id = dispatch(app, number)
    assert [r.status for r in runpod.requests_to("POST")] == [401]
    with app.app_context():
        assert outcome(run_id)[:2] == ("failed", "provider_auth")
        assert [(r["rule"], r["then"]) for r in refusals(run_id)] == [("credentials", "stop")]
