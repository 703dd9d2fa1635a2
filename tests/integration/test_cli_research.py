"""scripts/sagan_state.py over the research record (SPEC §9.4, §11): projects, beliefs, the
literature library and typed links, against a live server as a real `python3` subprocess;
refusals print the server's sentence and exit 1, bad usage exits 2 without a request."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from models import LiteratureItem, db
from models.research import Belief, Project, RecordLink
from tests.fakes.literature_server import FakeLiterature

CLI = Path(__file__).resolve().parents[2] / "scripts" / "sagan_state.py"


@pytest.fixture
def cli(live_server, api_client):
    """Run the CLI with a read/write token against the live server; returns CompletedProcess."""
    token = api_client("read,write").secret

    def run(*args, stdin: str | None = None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("SAGAN_")}
        env.update(SAGAN_BASE_URL=live_server.url, SAGAN_API_TOKEN=token)
        return subprocess.run([sys.executable, "-I", str(CLI), *args], capture_output=True, text=True, env=env,
                              timeout=60, input=stdin)
    return run


@pytest.fixture
def fake_literature(app):
    """arXiv, Crossref and Semantic Scholar at a loopback fake, for this test."""
    with FakeLiterature() as fake:
        saved = {key: app.config.get(key) for key in fake.config()}
        app.config.update(fake.config())
        try:
            yield fake
        finally:
            app.config.update(saved)


def _count(app, model) -> int:
    with app.app_context():
        return db.session.scalar(sa.select(sa.func.count()).select_from(model))


def test_help_names_the_research_commands(cli):
    """Does --help name projects, beliefs, literature and link, and `literature --help` its actions?"""
    out = cli("--help")
    assert out.returncode == 0 and all(name in out.stdout for name in ("projects", "beliefs", "literature", "link"))
    assert "search,add,show" in cli("literature", "--help").stdout


def test_projects_create_list_and_show(cli, app):
    """Does `projects create` (summary from standard input) make a project that `projects`
    lists and `projects show` prints, as JSON when piped and as a summary with --json off?"""
    made = cli("projects", "create", "--title", "Emergent misalignment", "--question", "Why?",
               "--summary-file", "-", stdin="It **generalizes**.")
    assert made.returncode == 0, made.stderr
    assert "project emergent-misalignment created" in made.stdout
    listed = json.loads(cli("projects").stdout)["projects"]
    assert [(p["slug"], p["question"], p["summaryMd"]) for p in listed] == [
        ("emergent-misalignment", "Why?", "It **generalizes**.")]
    shown = json.loads(cli("projects", "show", "emergent-misalignment").stdout)
    assert shown["project"]["title"] == "Emergent misalignment" and shown["publishedNarrative"] is None


def test_project_refusals_exit_1_and_usage_errors_exit_2(cli, app):
    """Are a missing title (usage, 2), an empty title and an unknown project (the server's
    sentence, 1) refused, with nothing created?"""
    assert cli("projects", "create").returncode == 2
    empty = cli("projects", "create", "--title", " ")
    assert empty.returncode == 1 and empty.stderr.startswith("error 4")
    missing = cli("projects", "show", "no-such-project")
    assert missing.returncode == 1 and "error 404" in missing.stderr
    bad_status = cli("projects", "--status", "sleeping")
    assert bad_status.returncode == 1 and "error 400" in bad_status.stderr
    assert _count(app, Project) == 0


def test_beliefs_create_list_and_show(cli, app):
    """Does `beliefs create` state a belief in a project, `beliefs --project` list it and
    `beliefs show B1` print it, with its links?"""
    cli("projects", "create", "--title", "Probing")
    made = cli("beliefs", "create", "--title", "Probes find the feature", "--belief", "At layer 12.",
               "--status", "active", "--confidence", "MODERATE", "--project", "probing", "--next-test", "Seeds.")
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("B1 created: Probes find the feature")
    listed = json.loads(cli("beliefs", "--project", "probing", "--status", "active").stdout)["beliefs"]
    assert [(b["cite"], b["currentBelief"], b["nextTest"]) for b in listed] == [("B1", "At layer 12.", "Seeds.")]
    shown = json.loads(cli("beliefs", "show", "B1").stdout)
    assert shown["belief"]["confidence"] == "MODERATE" and shown["versions"]
    assert json.loads(cli("beliefs", "-q", "nothing like it").stdout)["beliefs"] == []


def test_belief_refusals_print_the_servers_sentence(cli, app):
    """Are a bad confidence, an unknown project, an unknown belief and a bad status filter
    refused with the server's message and exit 1, nothing created?"""
    bad = cli("beliefs", "create", "--title", "T", "--confidence", "SURE")
    assert bad.returncode == 1 and "confidence" in bad.stderr.lower()
    assert cli("beliefs", "create", "--title", "T", "--project", "nowhere").returncode == 1
    assert "error 404" in cli("beliefs", "show", "B99").stderr
    assert cli("beliefs", "--status", "sleeping").returncode == 1
    assert _count(app, Belief) == 0


def test_literature_add_by_identifier_and_by_fields_search_and_show(cli, app, fake_literature):
    """Does `literature add` take an arXiv id (metadata from arXiv) and, again, merge; take
    fields by hand; and do `literature search` and `literature show` find and print them?"""
    fake_literature.arxiv["2401.01234"] = ("Sparse probes find features", ["Ada Lovelace"], "We probe layer 12.")
    cli("projects", "create", "--title", "Probing")
    added = cli("literature", "add", "arXiv:2401.01234v2", "--project", "probing")
    assert added.returncode == 0, added.stderr
    assert added.stdout.startswith("added: Sparse probes find features")
    again = cli("literature", "add", "2401.01234")
    assert again.stdout.startswith("already in the library (merged)")
    manual = cli("literature", "add", "--title", "A blog post on probes", "--type", "blog_post",
                 "--authors", "Turing, Alan; Hopper, Grace", "--year", "2025", "--tags", "probes, blog")
    assert manual.returncode == 0, manual.stderr
    found = json.loads(cli("literature", "search", "probes").stdout)["items"]
    assert {i["title"] for i in found} == {"Sparse probes find features", "A blog post on probes"}
    only_posts = json.loads(cli("literature", "search", "--type", "blog_post").stdout)["items"]
    assert [(i["authors"], i["tags"], i["year"]) for i in only_posts] == [
        (["Turing, Alan", "Hopper, Grace"], ["probes", "blog"], 2025)]
    paper = next(i for i in found if i["arxivId"] == "2401.01234")
    shown = json.loads(cli("literature", "show", paper["id"]).stdout)["item"]
    assert shown["abstract"] == "We probe layer 12." and shown["projectId"] is not None
    assert _count(app, LiteratureItem) == 2


def test_literature_bad_input_is_refused(cli, app, fake_literature):
    """Are an identifier with fields (usage), no identifier and no title (usage), an unknown
    type, a bad year, an identifier no source knows and an unknown id each refused, nothing added?"""
    both = cli("literature", "add", "arXiv:2401.01234", "--title", "T")
    assert both.returncode == 2 and "not both" in both.stderr
    assert cli("literature", "add").returncode == 2
    assert cli("literature").returncode == 2
    bad_type = cli("literature", "add", "--title", "T", "--type", "poem")
    assert bad_type.returncode == 1 and "type" in bad_type.stderr.lower()
    assert cli("literature", "add", "--title", "T", "--year", "soon").returncode == 1
    unknown = cli("literature", "add", "arXiv:2401.99999")
    assert unknown.returncode == 1 and "arXiv knows no paper 2401.99999" in unknown.stderr
    assert "error 404" in cli("literature", "show", "not-an-id").stderr
    assert cli("literature", "search", "--read-state", "skimmed").returncode == 1
    assert _count(app, LiteratureItem) == 0


def test_link_two_typed_references(cli, app, make_experiment):
    """Does `link "#N" tests B1` link an experiment to a belief (shown on the belief), and are an
    unknown kind and an unknown record refused with the server's sentence, nothing linked?"""
    number = make_experiment("Probe sweep")
    cli("beliefs", "create", "--title", "Probes find the feature")
    made = cli("link", f"#{number}", "tests", "B1", "--note", "the sweep tests it")
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith(f"linked: #{number} tests B1")
    links = json.loads(cli("beliefs", "show", "B1").stdout)["links"]["incoming"]
    assert [(link["kind"], link["sourceKind"], link["note"]) for link in links] == [
        ("tests", "experiment", "the sweep tests it")]
    bad_kind = cli("link", f"#{number}", "proves", "B1")
    assert bad_kind.returncode == 1 and "error 4" in bad_kind.stderr
    missing = cli("link", f"#{number}", "tests", "B99")
    assert missing.returncode == 1 and "No belief B99" in missing.stderr
    assert _count(app, RecordLink) == 1


def test_summaries_for_people(cli, app):
    """Does --summary print one line per record (and the empty states) instead of JSON?"""
    assert cli("projects", "--summary").stdout.strip() == "no projects"
    assert cli("beliefs", "--summary").stdout.strip() == "no beliefs"
    assert cli("literature", "search", "x", "--summary").stdout.strip() == "nothing in the library matches"
    cli("projects", "create", "--title", "Probing", "--question", "Do probes work?")
    cli("beliefs", "create", "--title", "Probes find the feature", "--belief", "At layer 12.", "--project", "probing")
    cli("literature", "add", "--title", "A post", "--authors", "Alan Turing", "--doi", "10.1000/post")
    assert cli("projects", "--summary").stdout.startswith("probing ")
    shown = cli("projects", "show", "probing", "--summary").stdout
    assert "question: Do probes work?" in shown and "no published narrative" in shown
    belief = cli("beliefs", "show", "B1", "--summary").stdout
    assert belief.startswith("B1      draft        LOW       Probes find the feature") and "believed: At layer 12." in belief
    [item] = json.loads(cli("literature", "search").stdout)["items"]
    line = cli("literature", "search", "--summary").stdout
    assert "Alan Turing" in line and "A post" in line and "doi:10.1000/post" in line
    assert f"id: {item['id']}" in cli("literature", "show", item["id"], "--summary").stdout
