"""Full-page screenshots of the main pages, for looking at them (not part of the test run).

Builds the schema in TEST_DATABASE_URL (which it WIPES — point it at a scratch database),
loads the curated demo, serves the app on a free port and photographs every page at
desktop and phone widths in light and dark:

    TEST_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1:5432/sagan_shots \\
    TEST_REDIS_URL=redis://127.0.0.1:6379/12 \\
    .venv/bin/python -m tests.e2e.screenshots --out /tmp/sagan-shots

It also reports any page wider than its viewport (horizontal scrolling) and any CSP
refusal, so a glance at the output says whether the phone layout holds.
"""
from __future__ import annotations

import argparse
import os
import sys
from datetime import date, timedelta
from pathlib import Path

WIDTHS = {"desktop": (1280, 900), "phone": (390, 844), "narrow": (360, 740)}


TRANSPARENT_CHART = """<svg xmlns="http://www.w3.org/2000/svg" width="320pt" height="200pt" viewBox="0 0 320 200">
 <g id="figure_1"><path d="M 0 200 L 320 200 L 320 0 L 0 0 z" style="fill: none"/>
  <path d="M 40 170 L 310 170 M 40 170 L 40 20" style="fill: none; stroke: #000000; stroke-width: 1.2"/>
  <path d="M 60 60 L 110 95 L 160 80 L 210 130 L 260 120 L 300 150"
        style="fill: none; stroke: #1f77b4; stroke-width: 2.5; stroke-linecap: square"/>
  <path d="M 60 70 L 110 75 L 160 110 L 210 100 L 260 140 L 300 135"
        style="fill: none; stroke: #ff7f0e; stroke-width: 2.5; stroke-linecap: square"/>
  <text x="175" y="192" style="font-size: 11px; font-family: 'DejaVu Sans', sans-serif; text-anchor: middle">seed</text>
  <text x="175" y="14" style="font-size: 12px; font-family: 'DejaVu Sans', sans-serif; text-anchor: middle">Validation loss by seed</text>
 </g></svg>"""


def _results_demo(number_of: dict) -> tuple[str, int]:
    """The realistic clean result on the promoted and the awaiting experiments, a comment
    thread, and a share link for all promoted results; returns (token, shared number)."""
    from models import Experiment, db
    from services.core.actors import Actor
    from services.planning import discussion
    from services.results import results, shares
    html = (Path(__file__).resolve().parents[1] / "fixtures" / "results" / "clean_result.html").read_text()
    owner = Actor("owner", None, "Owner")
    for status in ("awaiting_promotion", "shared"):
        experiment = db.session.scalar(db.select(Experiment).where(Experiment.number == number_of[status]))
        experiment.title = "Does the easy-to-hard curriculum speed up the 125M model?"  # the question asked
        results.save_clean_result(experiment, html, Actor("agent", None, "analyzer"),
                                  title="Curriculum ordering changes final loss by <1% (MODERATE confidence)")
        # A chart as plotting libraries write it: transparent, every shape styled inline.
        results.attach_markup(experiment, "svg", TRANSPARENT_CHART, Actor("agent", None, "analyzer"),
                              title="Validation loss by seed (transparent SVG)")
        discussion.post_comment("experiment", experiment, "Is the 0.6% gap inside the seed spread at 350M too?", owner)
        if status == "shared":  # shared before it had a result: promoted again, with it
            results.promote(experiment, "shared", owner, confirm_lint=True)
    link, token = shares.create_link(scope="all_promoted", label="Results for Dr. Ada", include_comments=True)
    db.session.commit()
    return token, number_of["shared"]


def _metrics_demo(numbers: list[int]) -> None:
    """Training curves for these experiments, posted through the real ingest: two seeds each,
    loss and accuracy over 20,000 steps (downsampled when drawn), a learning rate; agent runs
    and a pod with a rate for the cost ledger. Each experiment learns a little differently."""
    import math
    import random
    import uuid

    from models import AgentRun, Experiment, Pod, db
    from services.dispatch import metrics
    for rank, number in enumerate(numbers):
        experiment = db.session.scalar(db.select(Experiment).where(Experiment.number == number))
        db.session.add(AgentRun(id=uuid.uuid4(), kind="apply", agent="code-writer", request="r", status="completed",
                                scope_id=experiment.id, model="claude-sonnet-5-5", cost_usd=0.84 + rank,
                                input_tokens=180_000, output_tokens=22_000))
        for seed in range(2):
            pod = Pod(id=uuid.uuid4(), experiment_id=experiment.id, account="team", run_index=seed,
                      name=f"sagan-{number}-shots-{seed}", status="exited", cost_per_hr=0.69,
                      uptime_seconds=5400 + 600 * seed, gpu_type_id="NVIDIA GeForce RTX 4090")
            db.session.add(pod)
            db.session.flush()
            rng = random.Random(number * 10 + seed)
            floor, speed = 0.55 + 0.12 * rank + 0.03 * seed, 1800 * (1 + 0.3 * rank)
            rows = []
            for step in range(0, 20_000, 2):
                loss = floor + 2.2 * math.exp(-step / speed) + rng.gauss(0, 0.04)
                rows.append({"step": step, "name": "loss", "value": loss})
                if step % 500 == 0:
                    accuracy = 100 * (0.9 - 0.05 * rank - 0.8 * math.exp(-step / (speed * 1.4))) + rng.gauss(0, 0.4)
                    rows.append({"step": step, "name": "val/accuracy [%]", "value": accuracy})
                    rows.append({"step": step, "name": "lr", "value": 3e-4 * min(1, step / 1000)
                                 * 0.5 * (1 + math.cos(math.pi * step / 20_000))})
            for seq, start in enumerate(range(0, len(rows), metrics.BATCH_MAX), start=1):
                metrics.record_batch(pod, metrics.parse_batch({"seq": seq,
                                                               "points": rows[start:start + metrics.BATCH_MAX]}))
    db.session.commit()


def _beliefs_demo(number_of: dict) -> int:
    """A belief with a history, a pending proposal from the finished experiment's analyzer, and
    links both ways; returns its number."""
    from models import Experiment, db
    from services.core.actors import Actor
    from services.research import beliefs, links
    from services.workflow import runs
    owner = Actor("owner", None, "Owner")
    experiment = db.session.scalar(db.select(Experiment).where(Experiment.number == number_of["shared"]))
    belief = beliefs.create_belief({
        "title": "Curriculum ordering barely matters at 125M", "status": "active", "confidence": "LOW",
        "current_belief": "Easy-to-hard ordering changes final loss by **less than 1%** at 125M parameters.",
        "evidence": f"#{experiment.number}: three seeds, 0.6% gap.", "counterevidence": "Bengio et al. (2009) "
        "report larger gains on small models.", "next_test": "Repeat at 350M with five seeds."}, owner)
    beliefs.create_belief({"title": "Warmup length dominates the first 1k steps", "status": "supported"}, owner)
    beliefs.edit_belief(belief, {"confidence": "MODERATE", "reasoning": "A second seed agreed.",
                                 "experiment": f"#{experiment.number}"}, owner)
    run = runs.create_run(kind="qa", agent="analyzer", request="Analyse.", scope_id=experiment.id)
    beliefs.propose_update(belief, experiment, run, status="supported", confidence="MODERATE",
                           text="Easy-to-hard ordering changes final loss by less than 1% at 125M; the gap is "
                                "inside the seed spread.",
                           evidence=f"#{experiment.number}: 0.6% gap, seed spread 0.8%.",
                           reasoning="The gap is smaller than the spread over seeds, so ordering does not "
                                     "matter at this scale.")
    source = links.describe("experiment", experiment)
    target = links.describe("belief", belief)
    links.create_link(source, "tests", target, Actor("agent", None, "planner"), "the plan names it")
    links.create_link(links.describe("clean_result", experiment), "supports", target, owner)
    db.session.commit()
    return belief.number


def _ideation_demo(number_of: dict) -> int:
    """An ideation session on the awaiting experiment's clean result: three answers, two
    Claude-proposed cards (one promoted to a proposed experiment), the owner's own card and a
    discarded one; returns the session's number."""
    from models import Experiment, db
    from services.core.actors import Actor
    from services.planning import ideation
    from services.workflow import runs
    owner = Actor("owner", None, "Owner")
    experiment = db.session.scalar(db.select(Experiment).where(Experiment.number == number_of["awaiting_promotion"]))
    session = ideation.start_session("clean_result", experiment.id, owner)
    ideation.save_answers(session, {
        "1": "That three seeds are enough to see a 0.6% gap: the spread at 350M may be wider.",
        "2": "The warm-up length: fixed at 2% of steps in every run.",
        "4": "Repeat the 125M run with the curriculum reversed (hard-to-easy), two seeds."})
    run = runs.create_run(kind="apply", agent=ideation.AGENT, request="Propose.", scope_id=session.id,
                          scope_kind=ideation.SCOPE, status="completed")
    promoted = ideation.add_card(session, "Ablate the warm-up length at 125M", "From answer 2: the warm-up was "
                                 "**never ablated**; 0.5%, 2% and 5% of steps, two seeds each.", origin="claude", run=run)
    ideation.add_card(session, "Reverse the curriculum as a control", "From answer 4: if hard-to-easy matches "
                      "easy-to-hard, ordering is not what moves the loss.", origin="claude", run=run)
    ideation.add_card(session, "Read the 2009 curriculum paper's small-model section again",
                      "Bengio et al. report larger gains; check their model sizes.")
    dropped = ideation.add_card(session, "Try a 1B model", "Too expensive this month.", origin="claude", run=run)
    ideation.discard(dropped)
    ideation.promote(session, promoted, "experiment", owner)
    db.session.commit()
    return session.number


def _spend_demo() -> None:
    """Agent runs of this week with costs, most of them judged, so Today's Spend shows its
    split by classification and /runs its classification column."""
    from models import db
    from services.core.clock import utcnow
    from services.workflow import runs
    for agent, cost, classification, by in (("analyzer", 1.84, "useful", "owner"),
                                            ("experiment-planner", 0.62, "useful", "agent"),
                                            ("clean-result-critic", 0.41, "not_useful", "owner"),
                                            ("code-reviewer", 0.27, "pending", None),
                                            ("literature-scout", None, "pending", None),
                                            ("weekly-review", 0.12, "archived", "owner")):
        run = runs.create_run(kind="apply", agent=agent, request="Demo spend.", status="completed")
        run.cost_usd, run.classification, run.classification_by = cost, classification, by
        run.started_at = run.completed_at = utcnow()
    db.session.commit()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="/tmp/sagan-shots", help="directory for the PNG files")
    parser.add_argument("--widths", default="desktop,phone", help=f"any of {','.join(WIDTHS)}")
    parser.add_argument("--schemes", default="light,dark")
    parser.add_argument("--only", default="", help="comma-separated page names to shoot")
    parser.add_argument("--slices", action="store_true",
                        help="also save tall pages in screen-sized parts (easier to read)")
    args = parser.parse_args(argv)
    if not os.environ.get("TEST_DATABASE_URL"):
        print("Set TEST_DATABASE_URL to a scratch database: this script wipes it.", file=sys.stderr)
        return 2

    from playwright.sync_api import sync_playwright

    from app import create_app
    from config import TestConfig
    from models import Experiment, db
    from services.core.actors import Actor
    from services.core.auth import create_owner, create_token, revoke_token
    from services.pipeline import demo, demo_research
    from services.planning import approvals
    from tests.conftest import OWNER_EMAIL, OWNER_PASSWORD, build_schema
    from tests.e2e.fit import sideways_overflow
    from tests.e2e.live import CSP_RECORDER, LiveServer, chromium_missing_message, launch_chromium

    if (problem := chromium_missing_message()):
        print(problem, file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    app = create_app(TestConfig)
    build_schema(app)
    import redis
    redis.Redis.from_url(app.config["REDIS_URL"]).flushdb()
    with app.app_context():
        create_owner(OWNER_EMAIL, OWNER_PASSWORD)
        demo.load_curated()
        create_token("laptop CLI", "read,write")
        old, _ = create_token("old notebook", "read")
        revoke_token(old.id)
        db.session.commit()
        # A real plan awaiting approval, from the fixture plan the approval tests use.
        planned = db.session.scalars(db.select(Experiment).where(Experiment.status == "planning")).first()
        planned.pod_account = "personal"
        plan = (Path(__file__).resolve().parents[1] / "fixtures" / "plans" / "two_pod_seed_sweep.md").read_text()
        submission = approvals.submit_plan(planned, plan, Actor("agent", None, "planner"), source="api")
        db.session.commit()
        approval_id = submission.approval.id if submission.approval else None
        with_plan = planned.number
        number_of = {e.status: e.number for e in db.session.scalars(db.select(Experiment))
                     if e.number != with_plan}
        # The curves first: a share link charts the runs its result was promoted with.
        _metrics_demo([number_of["awaiting_promotion"], number_of["shared"]])
        share_token, shared_number = _results_demo(number_of)
        belief_number = _beliefs_demo(number_of)
        ideation_number = _ideation_demo(number_of)
        _spend_demo()
        from services.day import daily_log
        log_day = daily_log.write(daily_log.today(), "owner").day.isoformat()
        daily_log.write(daily_log.today() - timedelta(days=1), "scheduler")  # Today's "Yesterday"
        db.session.commit()
    pages = {
        "login": "/login",
        "today": "/",
        "board": "/board",
        "experiment-plan-pending": f"/experiments/{number_of['plan_pending']}",
        "experiment-blocked": f"/experiments/{number_of['blocked']}",
        "experiment-with-plan": f"/experiments/{with_plan}",
        "approvals": "/approvals",
        "approval": f"/approvals/{approval_id}",
        "settings": "/settings",
        "runs": "/runs",
        "experiments": "/experiments",
        "your-turn": "/your-turn",
        "api-tokens": "/api-tokens",
        "new-experiment": "/experiments/new",
        "api-tokens-created": "/api-tokens",  # after creating one: the secret shown once
        "board-csrf-toast": "/board",  # a move refused by an expired CSRF token
        "clean-result": f"/experiments/{number_of['awaiting_promotion']}#clean-result",
        "experiment-finished": f"/experiments/{number_of['shared']}",
        "share-list": f"/s/{share_token}",
        "share-result": f"/s/{share_token}/{shared_number}",
        "metric-charts": f"/experiments/{number_of['awaiting_promotion']}#metrics",
        "compare": f"/experiments/compare?e={number_of['awaiting_promotion']}&e={number_of['shared']}",
        "beliefs": "/beliefs",
        "belief": f"/beliefs/{belief_number}",
        "belief-link-form": f"/beliefs/{belief_number}#links",
        "new-belief": "/beliefs/new",
        "log": "/log",
        "log-day": f"/log/{log_day}",
        "log-day-empty": f"/log/{date.fromisoformat(log_day) - timedelta(days=2)}",  # yesterday is written
        "project": f"/p/{demo_research.PROJECT_SLUG}",
        "library": "/library",
        "todos": "/todos",  # the curated demo's todos
        "todo": "/todos/7",  # the demo todo that became an experiment
        "ideation": f"/ideas/{ideation_number}",
        "ideas": "/ideas",
    }
    if args.only:
        pages = {k: v for k, v in pages.items() if k in args.only.split(",")}
    problems = []
    with LiveServer(app) as server, sync_playwright() as playwright:
        browser = launch_chromium(playwright)
        for scheme in args.schemes.split(","):
            for width_name in args.widths.split(","):
                width, height = WIDTHS[width_name]
                context = browser.new_context(base_url=server.url, color_scheme=scheme,
                                              viewport={"width": width, "height": height})
                context.add_init_script(CSP_RECORDER)
                page = context.new_page()
                console = []
                page.on("console", lambda m, errors=console: errors.append(m.text) if m.type == "error" else None)
                for name, path in pages.items():
                    if name == "login":
                        page.goto(path)
                    else:
                        if "/login" in page.url or page.url == "about:blank":
                            page.goto("/login")
                            page.get_by_label("Email").fill(OWNER_EMAIL)
                            page.get_by_label("Password").fill(OWNER_PASSWORD)
                            page.get_by_role("button", name="Log in").click()
                            page.wait_for_url(lambda u: "/login" not in u)
                        page.goto(path)
                    if name == "api-tokens-created":
                        page.get_by_label("Name").fill("CI runner")
                        page.get_by_role("button", name="Create token").click()
                        page.get_by_text("Copy your new token now").wait_for()
                    if name == "board-csrf-toast":
                        number = number_of["plan_pending"]
                        page.evaluate("""() => {
                            document.body.setAttribute('hx-headers', '{"X-CSRFToken": "expired"}');
                            document.querySelectorAll('input[name=csrf_token]').forEach(i => i.value = 'x');
                        }""")
                        card = page.locator(f"#card-{number}")
                        card.get_by_text("Move to…").click()
                        card.locator("select").select_option("approved")
                        card.get_by_role("button", name="Move").click()
                        page.locator("#toasts .toast").wait_for()
                    if name == "belief-link-form":
                        page.locator("#links summary").click()
                        page.get_by_label("Linked record").fill("#999")
                        page.get_by_role("button", name="Add link").click()
                        page.locator("#links .error").wait_for()
                    page.wait_for_load_state("networkidle")
                    if page.locator("[data-metric-chart]").count():
                        page.locator("[data-metric-chart] .uplot").first.wait_for()
                    file = out / f"{name}-{width_name}-{scheme}.png"
                    page.screenshot(path=str(file), full_page=True)
                    if name == "clean-result":
                        # The section itself, frame sized by result_frame.js, design block opened.
                        section = page.locator("#clean-result")
                        section.locator("iframe").first.content_frame.locator("summary").first.click()
                        page.wait_for_timeout(300)
                        section.screenshot(path=str(file.with_name(f"{file.stem}.section.png")))
                    if name == "metric-charts":
                        # The charts with the cost ledger, the cursor on the first chart: hover values.
                        # The header stays at the top of the page, not over the clipped sections.
                        page.evaluate("document.querySelector('.topbar').style.position = 'static'")
                        plot = page.locator("[data-metric-chart] .u-over").first
                        plot.scroll_into_view_if_needed()
                        box = plot.bounding_box()
                        page.mouse.move(box["x"] + box["width"] * 0.35, box["y"] + box["height"] * 0.5)
                        page.wait_for_timeout(200)
                        # Clipped from the full page, so the sticky header does not cover the top.
                        for section, suffix in (("#metrics", "section"), ("#cost", "cost")):
                            box = page.evaluate("""(s) => { const r = document.querySelector(s).getBoundingClientRect();
                                return {x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height}; }""",
                                                section)
                            page.screenshot(path=str(file.with_name(f"{file.stem}.{suffix}.png")), full_page=True,
                                            clip=box)
                    if args.slices:
                        total = page.evaluate("document.documentElement.scrollHeight")
                        for part, top in enumerate(range(0, total, height)):
                            page.screenshot(path=str(file.with_name(f"{file.stem}.part{part + 1}.png")),
                                            full_page=True, clip={"x": 0, "y": top, "width": width,
                                                                  "height": min(height, total - top)})
                    overflow = sideways_overflow(page)
                    if overflow > 0:
                        problems.append(f"{file.name}: {overflow}px wider than the viewport")
                    problems += [f"{file.name}: {v}" for v in page.evaluate("window.__cspViolations")]
                    print(file)
                problems += [f"console error ({scheme}, {width_name}): {m}" for m in console]
                context.close()
        browser.close()
    for problem in problems:
        print("PROBLEM", problem)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
