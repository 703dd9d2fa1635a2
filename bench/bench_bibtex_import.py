"""BibTeX import (SPEC §11.3): a generated library of 5,000 entries (bench/literature_corpus.py:
titles, two to six authors in "Last, First" form, abstracts, a third with a DOI, a third with
an arXiv eprint, some with LaTeX accents and braces) imported into an empty library through
`bibtex.import_bibtex` and committed, timed in process on PostgreSQL; then the same file again,
every entry merging into the item it made.

Budget: each import under 5 s.
Prints one JSON document on stdout and a short table on stderr.

Run: .venv/bin/python bench/bench_bibtex_import.py [--entries 5000]
"""
from __future__ import annotations

import argparse
import time

import harness

BUDGET_S = 5.0


def bibtex_library(entries: int, seed: int = 5) -> str:
    """A .bib file of `entries` distinct works."""
    from literature_corpus import Vocabulary

    vocabulary = Vocabulary(seed)
    rng = vocabulary.rng
    parts = []
    for n in range(entries):
        names = [name.split() for name in vocabulary.authors()]
        authors = " and ".join(f"{last}, {first}" for first, last in names)
        title = f"{{{vocabulary.title()}}} {n}" if n % 5 else f"On {{B}}ayesian {vocabulary.title()} {n}"
        fields = [f"  title = {{{title}}}", f"  author = {{{authors}}}", f"  year = {{{2015 + n % 11}}}",
                  f"  journal = {{{rng.choice(('NeurIPS', 'ICML', 'ICLR', 'TMLR', 'JMLR'))}}}",
                  f"  abstract = {{{vocabulary.abstract(False)}}}", "  keywords = {probes, interpretability}"]
        if n % 3 == 0:
            fields.append(f"  doi = {{10.5555/bench.{n}}}")
        elif n % 3 == 1:
            fields += [f"  eprint = {{{2100 + n // 10000}.{n % 10000:05d}}}", "  archiveprefix = {arXiv}"]
        if n % 7 == 0:
            fields.append("  note = {Caf\\'e talk by G\\\"odel's students}")
        kind = "inproceedings" if n % 4 else "article"
        parts.append(f"@{kind}{{bench{n},\n" + ",\n".join(fields) + "\n}\n")
    return "\n".join(parts)


def timed_import(app, text: str) -> dict:
    from models import db
    from services.research import bibtex
    with app.app_context():
        start = time.perf_counter()
        report = bibtex.import_bibtex(text)
        db.session.commit()
        seconds = time.perf_counter() - start
    return {"seconds": round(seconds, 2), "added": report.added, "merged": report.merged,
            "problems": len(report.problems)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=5_000)
    args = parser.parse_args()
    app = harness.fresh_database()
    text = bibtex_library(args.entries)
    first = timed_import(app, text)
    again = timed_import(app, text)
    rows = [(f"import {args.entries:,} entries (added {first['added']:,})", f"{first['seconds']} s",
             f"< {BUDGET_S:g} s, all added", first["seconds"] < BUDGET_S and first["added"] == args.entries),
            (f"re-import (merged {again['merged']:,})", f"{again['seconds']} s",
             f"< {BUDGET_S:g} s, all merged", again["seconds"] < BUDGET_S and again["merged"] == args.entries)]
    harness.report({"bench": "bibtex_import", "database": "postgresql", "entries": args.entries,
                    "bytes": len(text.encode()), "import": first, "reimport": again, "budget_seconds": BUDGET_S,
                    "machine": harness.machine(), "meets_budget": all(r[3] for r in rows)}, rows)


if __name__ == "__main__":
    main()
