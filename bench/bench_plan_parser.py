"""Plan parser speed: a 30 KB+ plan must parse well under 50 ms (issue: plans and approvals).

Prints one JSON document: {"bench": "plan_parser", "bytes": …, "p50_ms": …, "p95_ms": …, "budget_ms": 50}.
Run: .venv/bin/python bench/bench_plan_parser.py
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from services.planning import plans  # noqa: E402


def main() -> None:
    base = (ROOT / "tests" / "fixtures" / "plans" / "two_pod_seed_sweep.md").read_text()
    padding = "".join(f"- risk {i}: data order may leak between seeds in shard {i}\n" for i in range(600))
    plan = base.replace("## Risks and Red Team", "## Risks and Red Team\n" + padding)
    assert len(plan.encode()) > 30_000
    timings = []
    for _ in range(200):
        start = time.perf_counter()
        plans.parse(plan)
        timings.append((time.perf_counter() - start) * 1000)
    timings.sort()
    result = {"bench": "plan_parser", "bytes": len(plan.encode()),
              "p50_ms": round(statistics.median(timings), 3),
              "p95_ms": round(timings[int(len(timings) * 0.95)], 3), "budget_ms": 50}
    print(json.dumps(result))
    print(f"plan parser: {result['bytes']:,} bytes, p50 {result['p50_ms']} ms, "
          f"p95 {result['p95_ms']} ms (budget {result['budget_ms']} ms)", file=sys.stderr)


if __name__ == "__main__":
    main()
