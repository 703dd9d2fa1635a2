"""Project page (SPEC §11.1): server time and SQL queries of `/p/<slug>` through the web server
as deployed (serve.py) on PostgreSQL, for a small project (20 experiments, 5 beliefs, 50
papers) and a full one: 2,000 experiments, 300 beliefs (two or three versions each, made on
the project's experiments, and two evidence links each from experiments), 5,000 literature
items, and 40 links to the project itself (its links panel).

Budget: the full project's page p50 under 50 ms; the same number of queries for both.
Prints one JSON document on stdout and a short table on stderr.

Run: .venv/bin/python bench/bench_project_page.py [--requests 40]
"""
from __future__ import annotations

import argparse

import harness

BUDGET_MS = 50
SIZES = {"small": {"experiments": 20, "beliefs": 5, "literature": 50, "project_links": 2},
         "full": {"experiments": 2_000, "beliefs": 300, "literature": 5_000, "project_links": 40}}


def seed_project(app, slug: str, size: dict, *, literature_start: int) -> None:
    """One project holding `size`'s records, inserted in bulk."""
    import random
    import uuid
    from datetime import timedelta

    import sqlalchemy as sa
    from literature_corpus import item_rows

    from models import Experiment, LiteratureItem, db
    from models.research import Belief, BeliefVersion, Project, RecordLink
    from services.core import registry
    from services.core.clock import utcnow
    from services.pipeline import demo
    from services.research import beliefs

    rng = random.Random(slug)
    now = utcnow()
    with app.app_context():
        project = Project(id=uuid.uuid4(), slug=slug, title=f"Bench project {slug}", status="active",
                          question="Do sparse probes find the same features across seeds?",
                          summary_md="A **bench** project: its page at full size.")
        db.session.add(project)
        db.session.commit()
        demo.load_scale(size["experiments"], seed=size["experiments"])
        db.session.execute(sa.update(Experiment).where(Experiment.project_id.is_(None))
                           .values(project_id=project.id))
        experiment_ids = list(db.session.scalars(sa.select(Experiment.id)
                                                 .where(Experiment.project_id == project.id)))
        belief_rows, version_rows, link_rows = [], [], []
        for n in range(size["beliefs"]):
            belief_id = uuid.uuid4()
            status = rng.choice(registry.BELIEF_STATUSES)
            confidence = rng.choice(registry.CONFIDENCES)
            versions = rng.randint(2, 3)
            stamp = now - timedelta(days=rng.randint(1, 300))
            text = (f"Probe {n} separates the classes in layer {n % 24} with accuracy above "
                    f"{60 + n % 30}% on held-out seeds; the effect holds after whitening. ") * 2
            belief_rows.append({"id": belief_id, "number": beliefs.next_number(), "project_id": project.id,
                                "title": f"Belief {n}: layer {n % 24} probes transfer across seeds",
                                "current_belief": text, "evidence": "See the linked experiments.",
                                "counterevidence": "", "next_test": f"Repeat with seed {n + 7} and a wider probe.",
                                "status": status, "confidence": confidence, "version": versions,
                                "created_at": stamp, "updated_at": stamp})
            for version in range(1, versions + 1):
                version_rows.append({"id": uuid.uuid4(), "belief_id": belief_id, "version": version,
                                     "title": f"Belief {n}", "current_belief": text, "evidence": "",
                                     "counterevidence": "", "next_test": "", "status": status,
                                     "confidence": confidence, "reasoning_md": "A new result.",
                                     "author_kind": "owner", "author_label": "bench",
                                     "experiment_id": rng.choice(experiment_ids), "proposal_id": None,
                                     "created_at": stamp, "updated_at": stamp})
            for kind, experiment_id in zip(("tests", "supports"), rng.sample(experiment_ids, 2)):
                link_rows.append({"id": uuid.uuid4(), "source_kind": "experiment", "source_id": experiment_id,
                                  "target_kind": "belief", "target_id": belief_id, "kind": kind, "note": "",
                                  "actor_kind": "owner", "actor_label": "bench", "created_at": stamp,
                                  "updated_at": stamp})
        items = item_rows(size["literature"], seed=literature_start, project_ids=[project.id],
                          start=literature_start, project_share=1.0)
        for item in items[:size["project_links"]]:
            link_rows.append({"id": uuid.uuid4(), "source_kind": "literature", "source_id": item["id"],
                              "target_kind": "project", "target_id": project.id,
                              "kind": rng.choice(("background", "inspiration", "threat")), "note": "",
                              "actor_kind": "owner", "actor_label": "bench", "created_at": now, "updated_at": now})
        db.session.execute(sa.insert(Belief), belief_rows)
        db.session.execute(sa.insert(BeliefVersion), version_rows)
        for start in range(0, len(items), 5000):
            db.session.execute(sa.insert(LiteratureItem), items[start:start + 5000])
        db.session.execute(sa.insert(RecordLink), link_rows)
        db.session.commit()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=40)
    args = parser.parse_args()
    app = harness.fresh_database()
    harness.create_owner(app)
    literature_start = 0
    for name, size in SIZES.items():
        seed_project(app, f"bench-{name}", size, literature_start=literature_start)
        literature_start += size["literature"]
    harness.vacuum_analyze()

    results, rows = {}, []
    with harness.Server() as server:
        client = harness.login(server.url)
        warmup = 4 * harness.WORKERS * harness.THREADS
        for name, size in SIZES.items():
            results[name] = {**size, "page": harness.sample(client, f"/p/bench-{name}", args.requests,
                                                            warmup=warmup)}
        client.close()
    for name, found in results.items():
        page = found["page"]
        budget = BUDGET_MS if name == "full" else None
        rows.append((f"/p/ {name} ({found['experiments']:,} exp., {found['beliefs']} beliefs) p50 / p95 (CPU p50)",
                     f"{page['server_p50_ms']} / {page['server_p95_ms']} ms ({page['server_cpu_p50_ms']})",
                     f"p50 < {budget} ms" if budget else "(no budget)",
                     page["server_p50_ms"] < budget if budget else None))
    query_counts = sorted({q for found in results.values() for q in found["page"]["queries"]})
    constant = len(query_counts) == 1
    rows.append(("/p/ SQL queries per render (small, full)", ", ".join(map(str, query_counts)), "the same", constant))
    within = results["full"]["page"]["server_p50_ms"] < BUDGET_MS
    harness.report({"bench": "project_page", "server": harness.server_label(), "database": "postgresql",
                    "sizes": results, "budget_p50_ms": BUDGET_MS, "queries": query_counts,
                    "queries_constant": constant, "machine": harness.machine(),
                    "meets_budget": within and constant}, rows)


if __name__ == "__main__":
    main()
