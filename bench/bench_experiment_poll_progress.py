"""The experiment page's poll while its pods post progress (a finding of the ten-minute soak).

A running experiment with 10 pods, each posting progress every 10 s through the real API,
and the page polling every 5 s with the version it holds — simulated time, so a run takes
seconds, not minutes: the pods' posts and the polls interleave as they would, and the
poll's memory of rendered pages (blueprints/progress_holds.py) sees its clock move by the
same steps. In process (Flask's test client through the whole WSGI stack), on PostgreSQL.

Measured side by side in the same run: SAGAN_LIVE_PROGRESS_SECONDS=0 (every post renders
the panels at the next poll: what the poll did before) against the default 15 s. Per
mode: polls answered 200 (rendered) and 304, statements and CPU per poll (mean; and per
rendered poll). Statements are those of the app's engine; the poll's fingerprint query runs on
the kept poll connection (services/core/lean_reads.py) and is not among them. Timing is CPU time of this process, never wall-clock budgets.

Run: .venv/bin/python bench/bench_experiment_poll_progress.py [--polls 60] [--pods 10]
"""
from __future__ import annotations

import argparse
import re
import time
import uuid

import harness

POLL_SECONDS = 5
POST_SECONDS = 10


def seed(app, pods: int) -> tuple[int, list[str]]:
    from models import AgentRun, Pod, db
    from services.core.actors import Actor
    from services.dispatch import tokens
    from services.pipeline import demo
    from services.workflow import experiments

    with app.app_context():
        experiment = experiments.create_experiment({"title": "Poll under posting pods"}, Actor("owner", None, "bench"))
        demo.walk_to(experiment, "running")
        run = AgentRun(id=uuid.uuid4(), kind="experiment", agent="bench", request="Bench dispatch.",
                       scope_id=experiment.id, status="waiting")
        db.session.add(run)
        db.session.flush()
        secrets = []
        for index in range(pods):
            secret, digest = tokens.new_token()
            db.session.add(Pod(id=uuid.uuid4(), agent_run_id=run.id, experiment_id=experiment.id, account="local",
                               name=f"sagan-poll-bench-{index}", status="running", progress_token_hash=digest))
            secrets.append(secret)
        db.session.commit()
        return experiment.number, secrets


def login(client) -> None:
    page = client.get("/login").get_data(as_text=True)
    token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
    answer = client.post("/login", data={"email": harness.OWNER_EMAIL, "password": harness.OWNER_PASSWORD,
                                         "csrf_token": token})
    assert answer.status_code == 302, answer.status_code


def run_mode(app, number: int, secrets: list[str], seq: dict, polls: int, wait: int) -> dict:
    """`polls` polls 5 s apart (simulated) with the pods posting between them; `seq` holds
    each pod's last post number across modes (a repeated number is a duplicate: not stored)."""
    import sqlalchemy as sa

    from blueprints import progress_holds
    from models import db

    app.config["LIVE_PROGRESS_SECONDS"] = wait
    progress_holds.forget()
    simulated = [0.0]
    progress_holds.time.monotonic = lambda: simulated[0]  # the memory's clock follows the simulation
    statements = [0]

    def count(*_args, **_kwargs):
        statements[0] += 1

    with app.app_context():
        sa.event.listen(db.engine, "before_cursor_execute", count)
    client = app.test_client()
    login(client)
    version = re.search(r'data-version="([0-9a-f]+)"', client.get(f"/experiments/{number}").get_data(as_text=True)).group(1)
    step = POST_SECONDS / len(secrets)  # the pods' posts spread evenly over their period
    next_post, rendered, held, cpu, rendered_cpu, poll_statements = 0.0, 0, 0, 0.0, 0.0, 0
    for poll in range(polls):
        poll_at = (poll + 1) * POLL_SECONDS
        while next_post < poll_at:  # the posts due before this poll
            secret = secrets[int(round(next_post / step)) % len(secrets)]
            seq[secret] += 1
            simulated[0] = next_post
            answer = client.post("/api/progress", json={"progressPct": min(99, seq[secret]), "seq": seq[secret],
                                                        "message": f"step {seq[secret] * 100}"},
                                 headers={"Authorization": f"Bearer {secret}"})
            assert answer.status_code < 300, answer.status_code
            next_post += step
        simulated[0] = poll_at
        before_statements, started = statements[0], time.process_time()
        answer = client.get(f"/experiments/{number}/live",
                            headers={"HX-Request": "true", "If-None-Match": f'"{version}"'})
        spent = time.process_time() - started
        poll_statements += statements[0] - before_statements
        cpu += spent
        if answer.status_code == 200:
            rendered += 1
            rendered_cpu += spent
            version = re.search(r'data-version="([0-9a-f]+)"', answer.get_data(as_text=True)).group(1)
        else:
            assert answer.status_code == 304, answer.status_code
            held += 1
    with app.app_context():
        sa.event.remove(db.engine, "before_cursor_execute", count)
    return {"live_progress_seconds": wait, "polls": polls, "rendered": rendered, "answered_304": held,
            "cpu_ms_per_poll": round(cpu * 1000 / polls, 2),
            "cpu_ms_per_rendered_poll": round(rendered_cpu * 1000 / rendered, 2) if rendered else None,
            "statements_per_poll": round(poll_statements / polls, 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--polls", type=int, default=60)
    parser.add_argument("--pods", type=int, default=10)
    args = parser.parse_args()
    app = harness.fresh_database()
    harness.create_owner(app)
    number, secrets = seed(app, args.pods)
    harness.vacuum_analyze()
    seq = {secret: 0 for secret in secrets}
    before = run_mode(app, number, secrets, seq, args.polls, 0)
    after = run_mode(app, number, secrets, seq, args.polls, 15)
    harness.report({"bench": "experiment_poll_progress", "database": "postgresql", "machine": harness.machine(),
                    "pods": args.pods, "post_seconds": POST_SECONDS, "poll_seconds": POLL_SECONDS,
                    "every_post_renders": before, "progress_waits": after,
                    "cpu_ratio": round(after["cpu_ms_per_poll"] / before["cpu_ms_per_poll"], 3)},
                   [("CPU a poll, every post renders", f"{before['cpu_ms_per_poll']} ms", "", None),
                    ("CPU a poll, progress waits 15 s", f"{after['cpu_ms_per_poll']} ms", "", None),
                    ("rendered polls (of each mode's polls)", f"{before['rendered']} → {after['rendered']}", "", None),
                    ("statements a poll", f"{before['statements_per_poll']} → {after['statements_per_poll']}", "",
                     None)])


if __name__ == "__main__":
    main()
