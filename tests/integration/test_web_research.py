"""Web research: Anthropic's server-side web search and fetch offered to the
planner and the analyzer, switched and limited to domains in Settings, searches billed in the
run's cost, and cited pages kept as links under plans and clean results — against the
faithful fake model, through the real loop, worker, tools and sanitizer."""
from __future__ import annotations

from pathlib import Path

import pytest
import sqlalchemy as sa

from models import AgentRun, ApprovalRequest, Pod, RunEvent, Setting, db
from services.agents import web_tools
from services.claude import model_api
from services.core import settings
from services.core.actors import Actor
from services.core.errors import ValidationError
from services.core.sanitize import render_markdown
from services.planning import approvals
from services.workflow import experiments, lifecycle, orchestration
from tests.fakes.anthropic_server import cited, reply, text, tool_use, web_fetch, web_search, web_search_failing
from tests.integration.test_agent_runs import PLAN

SURVEY_PLAN = (Path(__file__).resolve().parents[1] / "fixtures" / "plans" / "survey_no_pods.md").read_text()
OWNER = Actor("owner", None, "owner")
SONNET = model_api.MODELS["claude-sonnet-5-5"].price
PAPERS = [("https://arxiv.org/abs/2401.00001", "Cubic sparsity schedules", "Eleven of fifteen use cubic."),
          ("https://openreview.net/forum?id=abc", "Gradual pruning revisited", "Linear schedules lag."),
          ("https://blog.example.com/pruning", "A blog post on pruning", "Opinions.")]
RESULT_HTML = ("<section><h2>TL;DR</h2><ul><li>Motivation: which schedules are used.</li><li>What I ran: a "
               "survey of the literature.</li><li>Results: most papers use a cubic schedule.</li>"
               "<li>Next steps: test cubic against linear.</li></ul></section><figure id=\"figure\"><table>"
               "<tr><th>Schedule</th><th>Papers</th></tr><tr><td>cubic</td><td>11</td></tr></table></figure>"
               "<details><summary>Experimental design</summary><p>A web survey.</p></details>")


def _run(run_id):
    db.session.expire_all()
    return db.session.get(AgentRun, run_id)


def _start_planner(app, number):
    with app.app_context():
        return orchestration.start_planner(experiments.get_experiment(number).id, OWNER, {}, mode="plan").id


def _web_tools_of(request) -> list[dict]:
    return [t for t in request.body.get("tools") or [] if str(t.get("type", "")).startswith("web_")]


def _is_analyzer(request) -> bool:
    return "run_analysis" in [t.get("name") for t in request.body.get("tools") or []]


def _token_cost(usage) -> float:
    return (usage["input_tokens"] * SONNET.input + usage["output_tokens"] * SONNET.output
            + usage["cache_creation_input_tokens"] * SONNET.cache_write
            + usage["cache_read_input_tokens"] * SONNET.cache_read) / 1_000_000


@pytest.fixture
def web_settings(app):
    """Set the owner's web-research settings for one test (rows are truncated after it)."""
    def put(**values):
        with app.app_context():
            for key, value in values.items():
                settings.put(key, value)
            db.session.commit()
    return put


def test_survey_reaches_awaiting_promotion_with_no_pods_and_web_citations(app, fake_anthropic, worker,
                                                                          make_experiment):
    """Done when: a survey goes from approval to awaiting_promotion with no pod; its
    analyzer searches the web, and the clean result lists the pages it cited as links."""
    number = make_experiment("Sparsity schedules in pruning papers", kind="survey", status="planning")
    with app.app_context():
        experiment = experiments.get_experiment(number)
        submission = approvals.submit_plan(experiment, SURVEY_PLAN, Actor("agent", None, "experiment-planner"),
                                           source="agent")
        assert submission.valid
        db.session.commit()
        approval = db.session.scalar(sa.select(ApprovalRequest))
        fake_anthropic.script(
            # the orchestrator
            reply(tool_use("set_status", {"status": "clean_result_drafting", "note": "Survey: no pods."})),
            reply(tool_use("spawn_agent", {"agent": "analyzer", "request": "Write the survey's clean result."})),
            # the analyzer: one search, text citing two results, then the result
            reply(web_search("sparsity schedule pruning", PAPERS),
                  cited("Most recent papers prune with a cubic schedule.", PAPERS[0][0], "Eleven of fifteen"),
                  cited("Linear schedules do worse.", PAPERS[1][0], "Linear schedules lag."),
                  tool_use("write_clean_result", {"html": RESULT_HTML, "title": "Most pruning papers use a "
                                                                                "cubic schedule (MODERATE confidence)"})),
            reply(tool_use("post_marker", {"marker": "epm:clean-result", "note": "Draft written."})),
            reply(text("The clean result is written.")),
            # the orchestrator, woken
            reply(tool_use("set_status", {"status": "awaiting_promotion", "note": "Ready for the owner."})),
            reply(text("The survey waits for promotion.")))
        effects = approvals.approve(approval, OWNER, confirm_unchecked=True)
        db.session.commit()
        lifecycle.run_side_effects(effects)
    worker()
    with app.app_context():
        db.session.expire_all()
        experiment = experiments.get_experiment(number)
        assert experiment.status == "awaiting_promotion" and experiment.has_clean_result
        assert db.session.scalar(sa.select(sa.func.count(Pod.id))) == 0
        body = experiment.body
        sources = body.split('<section id="sources">', 1)[1]
        assert '<a href="https://arxiv.org/abs/2401.00001"' in sources and "Cubic sparsity schedules" in sources
        assert '<a href="https://openreview.net/forum?id=abc"' in sources
        assert "blog.example.com" not in sources  # found but never cited
        analyzer = db.session.scalar(sa.select(AgentRun).where(AgentRun.agent == "analyzer"))
        # The run page shows the search and what it found.
        found = db.session.scalar(sa.select(RunEvent).where(RunEvent.run_id == analyzer.id,
                                                            RunEvent.event_type == "tool_result")
                                  .order_by(RunEvent.seq).limit(1))
        assert found.metadata_["tool"] == "web_search" and "3 result(s)" in found.body
        # One search at $10 per 1,000 is in the analyzer's cost, with its tokens.
        analyzer_calls = [r for q, r in zip(fake_anthropic.requests, fake_anthropic.responses) if _is_analyzer(q)]
        assert analyzer_calls[0]["usage"]["server_tool_use"]["web_search_requests"] == 1
        expected = sum(_token_cost(r["usage"]) for r in analyzer_calls) + 0.01
        assert float(analyzer.cost_usd) == pytest.approx(expected, abs=2e-6)
    analyzer_requests = [q for q in fake_anthropic.requests if _is_analyzer(q)]
    offered = _web_tools_of(analyzer_requests[0])
    assert [t["type"] for t in offered] == ["web_search_20250305", "web_fetch_20250910"]
    assert "allowed_domains" not in offered[0]  # none set: every domain (an empty list is a 400)
    # The search results went back unchanged (encrypted_content included) on the next call.
    sent_back = analyzer_requests[1].body["messages"][1]["content"]
    issued = next(r for q, r in zip(fake_anthropic.requests, fake_anthropic.responses) if q is analyzer_requests[0])
    assert [b for b in sent_back if b["type"] == "web_search_tool_result"] == \
        [b for b in issued["content"] if b["type"] == "web_search_tool_result"]
    # The orchestrator does not search (the analyzer drafts a survey's result).
    assert not _web_tools_of(fake_anthropic.requests[0])


def test_planner_plan_links_its_cited_sources_and_drops_a_javascript_url(app, client, owner, fake_anthropic,
                                                                        worker, make_experiment):
    """A plan written after a search gets a Sources list of markdown links, rendered through
    the sanitizer; a citation whose URL is javascript: is dropped, not linked."""
    number = make_experiment("Seed sweep", status="planning", pod_account="personal")
    evil = "javascript:alert(document.cookie)"
    fake_anthropic.script(
        reply(web_search("seed variance baselines", [PAPERS[0], (evil, "Click me", "Free results.")]),
              cited("Seed variance is about 1 point.", PAPERS[0][0], "Eleven of fifteen use cubic."),
              cited("See also this.", evil, "Free results."),
              tool_use("submit_plan", {"markdown": PLAN})),
        reply(text("Plan submitted.")))
    run_id = _start_planner(app, number)
    worker()
    with app.app_context():
        run = _run(run_id)
        assert run.status == "awaiting_approval", run.last_error
        plan = experiments.get_experiment(number).plan_md
        assert "## Sources" in plan and "(<https://arxiv.org/abs/2401.00001>)" in plan
        assert "javascript" not in plan and "Click me" not in plan
        rendered = render_markdown(plan)
        assert '<a href="https://arxiv.org/abs/2401.00001"' in rendered and "javascript" not in rendered
        # The final text on the run page names the source too (nothing new here: the plan has it).
        completed = db.session.scalar(sa.select(RunEvent.body).where(RunEvent.run_id == run_id,
                                                                     RunEvent.event_type == "completed"))
        assert completed == "Plan submitted."
        # A section of its own (not counted among the 11), before the runpod-spec block.
        assert plan.index("## Sources") < plan.index("```runpod-spec")
        approval_id = db.session.scalar(sa.select(ApprovalRequest.id))
    for url in (f"/experiments/{number}", f"/approvals/{approval_id}"):
        page = client.get(url).text
        shown = page.split("<summary>Sources</summary>", 1)[1].split("</details>", 1)[0]
        assert '<a href="https://arxiv.org/abs/2401.00001"' in shown and "javascript" not in shown, url


def test_allowed_domains_are_passed_through_and_limit_the_results(app, client, owner, fake_anthropic, worker,
                                                                  make_experiment, web_settings):
    """With allowed domains set, both tools carry them; results from elsewhere never reach the
    model, so they cannot be cited; fetching an outside page is a url_not_allowed result."""
    web_settings(web_allowed_domains=["arxiv.org", "openreview.net"])
    number = make_experiment("Domain-limited", status="planning", pod_account="personal")
    fake_anthropic.script(
        reply(web_search("pruning", PAPERS), web_fetch("https://blog.example.com/pruning"),
              cited("Cubic wins.", PAPERS[0][0], "Eleven"), cited("A blog agrees.", PAPERS[2][0], "Opinions."),
              tool_use("submit_plan", {"markdown": PLAN})),
        reply(text("Done.")))
    run_id = _start_planner(app, number)
    worker()
    offered = _web_tools_of(fake_anthropic.requests[0])
    assert [t["allowed_domains"] for t in offered] == [["arxiv.org", "openreview.net"]] * 2
    assert all(t["max_uses"] == app.config["WEB_TOOLS_MAX_USES"] for t in offered)
    content = fake_anthropic.responses[0]["content"]
    results = next(b for b in content if b["type"] == "web_search_tool_result")["content"]
    assert [r["url"] for r in results] == [PAPERS[0][0], PAPERS[1][0]]
    fetch = next(b for b in content if b["type"] == "web_fetch_tool_result")["content"]
    assert fetch == {"type": "web_fetch_tool_result_error", "error_code": "url_not_allowed"}
    with app.app_context():
        assert _run(run_id).status == "awaiting_approval", _run(run_id).last_error
        plan = experiments.get_experiment(number).plan_md
        assert PAPERS[0][0] in plan and "blog.example.com" not in plan
        errors = list(db.session.scalars(sa.select(RunEvent).where(RunEvent.run_id == run_id,
                                                                   RunEvent.event_type == "tool_result")
                                         .order_by(RunEvent.seq)))
        assert any(e.metadata_["is_error"] and "url_not_allowed" in e.body for e in errors)
    # The run page shows the search, what it found, and the refused fetch.
    page = client.get(f"/runs/{run_id}").text
    assert "web_search" in page and "Cubic sparsity schedules" in page and "web_fetch failed: url_not_allowed" in page


def test_web_tools_off_in_settings_are_not_in_the_request(app, fake_anthropic, worker, make_experiment,
                                                          web_settings):
    """The owner's switch off: neither server tool is offered to the planner (its own tools are)."""
    web_settings(web_tools_enabled=False, web_allowed_domains=["arxiv.org"])
    number = make_experiment("No web", status="planning", pod_account="personal")
    fake_anthropic.script(reply(tool_use("submit_plan", {"markdown": PLAN})), reply(text("Done.")))
    run_id = _start_planner(app, number)
    worker()
    with app.app_context():
        assert _run(run_id).status == "awaiting_approval"
    names = [t.get("name") for t in fake_anthropic.requests[0].body["tools"]]
    assert "submit_plan" in names and "web_search" not in names and "web_fetch" not in names


def test_a_failed_search_is_an_error_result_the_run_survives_and_is_not_billed(app, fake_anthropic, worker,
                                                                               make_experiment, web_settings):
    """A search past max_uses, or one the search service refuses, comes back as an error
    inside a 200 response; the run page marks it, the run goes on, no search is billed."""
    app.config["WEB_TOOLS_MAX_USES"] = 1
    try:
        number = make_experiment("Busy search", status="planning", pod_account="personal")
        fake_anthropic.script(
            reply(web_search_failing("too_many_requests"), web_search("again", PAPERS[:1]),
                  tool_use("submit_plan", {"markdown": PLAN})),
            reply(text("Done.")))
        run_id = _start_planner(app, number)
        worker()
    finally:
        app.config["WEB_TOOLS_MAX_USES"] = 5
    content = fake_anthropic.responses[0]["content"]
    codes = [b["content"]["error_code"] for b in content if b["type"] == "web_search_tool_result"]
    assert codes == ["too_many_requests", "max_uses_exceeded"]
    assert "server_tool_use" not in fake_anthropic.responses[0]["usage"]
    with app.app_context():
        run = _run(run_id)
        assert run.status == "awaiting_approval", run.last_error
        marked = [e.body for e in db.session.scalars(sa.select(RunEvent).where(
            RunEvent.run_id == run_id, RunEvent.event_type == "tool_result").order_by(RunEvent.seq))
                  if e.metadata_["is_error"]]
        assert marked == ["web_search failed: too_many_requests", "web_search failed: max_uses_exceeded"]
        assert float(run.cost_usd) == pytest.approx(sum(_token_cost(r["usage"]) for r in fake_anthropic.responses), abs=2e-6)


# --- the settings ------------------------------------------------------------------------------

@pytest.mark.parametrize("bad, reason", [
    ("https://arxiv.org", "without the scheme"),
    ("*.arxiv.org", "no wildcards"),
    ("arxiv", "is not a domain"),
    ("arxiv.org, exa mple.org<script>", "is not a domain"),
    ("-evil.org", "is not a domain"),
])
def test_bad_allowed_domains_are_refused_and_change_nothing(app, client, owner, web_settings, bad, reason):
    """Each bad entry gets a clear error on the Settings page and neither setting changes."""
    web_settings(web_tools_enabled=True, web_allowed_domains=["openreview.net"])
    page = client.post("/settings/web-research", data={"web_allowed_domains": bad, "csrf_token": owner.csrf()})
    assert page.status_code == 422 and reason in page.text
    with app.app_context():
        assert web_tools.allowed_domains() == ["openreview.net"] and web_tools.enabled()


def test_web_research_settings_saved_and_shown(app, client, owner):
    """Domains are normalised (case, duplicates) and stored; unticking the box turns the tools off."""
    with app.app_context():
        assert web_tools.enabled() and web_tools.allowed_domains() == []  # the defaults
    ok = client.post("/settings/web-research", data={"web_tools_enabled": "1", "csrf_token": owner.csrf(),
                                                     "web_allowed_domains": "ArXiv.org, openreview.net\nexample.org/Blog arxiv.org"})
    assert ok.status_code == 303
    with app.app_context():
        assert web_tools.allowed_domains() == ["arxiv.org", "openreview.net", "example.org/Blog"]
        assert web_tools.enabled()
    page = client.get("/settings").text
    assert not app.config["ANTHROPIC_API_KEY"] and "nothing searches until one is set" in page
    assert 'value="arxiv.org, openreview.net, example.org/Blog"' in page and 'name="web_tools_enabled" value="1" checked' in page
    off = client.post("/settings/web-research", data={"web_allowed_domains": "", "csrf_token": owner.csrf()})
    assert off.status_code == 303
    with app.app_context():
        assert not web_tools.enabled() and web_tools.allowed_domains() == []
        assert db.session.get(Setting, "web_tools_enabled").value is False


def test_too_many_domains_refused(app_ctx):
    with pytest.raises(ValidationError) as caught:
        web_tools.clean_domains(" ".join(f"d{i}.example.org" for i in range(101)))
    assert "At most 100" in caught.value.message


# --- sources and cost, directly -------------------------------------------------------------------

def test_sources_keep_only_http_urls_and_escape_titles(app_ctx):
    """Only http(s) citations become sources; titles cannot inject markup in either format."""
    conversation = [{"role": "assistant", "content": [{"type": "text", "text": "x", "citations": [
        {"type": "web_search_result_location", "url": "https://a.example.org/p?q=1&r=2", "title": "<b>A</b> [x](y)",
         "cited_text": "quote", "encrypted_index": "e"},
        {"type": "web_search_result_location", "url": "data:text/html,<script>", "title": "D", "cited_text": "",
         "encrypted_index": "e"},
        {"type": "web_search_result_location", "url": "JAVASCRIPT:alert(1)", "title": "J", "cited_text": "",
         "encrypted_index": "e"},
        {"type": "web_search_result_location", "url": "https://a.example.org/p?q=1&r=2", "title": "dup",
         "cited_text": "", "encrypted_index": "e"}]}]}]
    found = web_tools.sources(conversation)
    assert [s.url for s in found] == ["https://a.example.org/p?q=1&r=2"]
    rendered = render_markdown(web_tools.with_markdown_sources("Plan.", found))
    assert '<a href="https://a.example.org/p?q=1&amp;r=2"' in rendered and "<b>" not in rendered
    html = web_tools.with_html_sources("<p>Body</p>", found)
    assert "&lt;b&gt;A&lt;/b&gt;" in html and 'href="https://a.example.org/p?q=1&amp;r=2"' in html
    assert web_tools.with_html_sources(html, found) == html  # sent back as stored: no second list
    # Already linked: no second list.
    assert web_tools.with_markdown_sources("See https://a.example.org/p?q=1&r=2.", found) == \
        "See https://a.example.org/p?q=1&r=2."


def test_search_cost_is_added_to_a_calls_cost(app_ctx):
    class Usage:
        input_tokens, output_tokens, cache_creation_input_tokens, cache_read_input_tokens = 1000, 100, 0, 0

        class server_tool_use:  # noqa: N801 - the SDK's attribute name
            web_search_requests, web_fetch_requests = 3, 2
    tokens = (1000 * SONNET.input + 100 * SONNET.output) / 1_000_000
    assert model_api.cost("claude-sonnet-5-5", Usage) == pytest.approx(tokens + 0.03)
    assert model_api.cost("an-unpriced-model", Usage) is None


def test_settings_page_title_is_plain_and_the_sessions_panel_is_in_the_body(client, owner):
    """The Sessions panel used to sit inside the <title> block (so browsers never showed it)."""
    page = client.get("/settings").text
    title = page.split("<title>", 1)[1].split("</title>", 1)[0]
    assert title == "Settings · Sagan"
    body = page.split("<body", 1)[1]
    assert 'id="sessions"' in body and 'id="web-research"' in body


def test_a_sources_section_is_shown_but_not_counted_among_the_plan_sections(app_ctx):
    """The 11 sections stay the 11: Sources is optional, never 'missing', never counted."""
    from services.planning import plans
    before = plans.parse(PLAN, kind="experiment", account="personal")
    with_sources = plans.parse(web_tools.with_markdown_sources(PLAN, [web_tools.Source(
        "https://arxiv.org/abs/1", "A paper", "a quote")]), kind="experiment", account="personal")
    assert with_sources.data["section_count"] == before.data["section_count"] == 11
    assert with_sources.problems == before.problems
    assert with_sources.data["spec"] == before.data["spec"]
    assert [s["title"] for s in with_sources.data["sections"]][-1] == "Sources"
    assert "A paper" in with_sources.data["sources"] and "A paper" not in (with_sources.data["approval_checklist"] or "")


def test_a_fetched_page_the_model_cites_becomes_a_source(app, fake_anthropic, worker, make_experiment):
    """Web fetch runs with citations on; text citing the fetched page (a char_location naming
    the document by title) lists that page's URL under Sources."""
    number = make_experiment("Read one paper", status="planning", pod_account="personal")
    fake_anthropic.script(
        reply(web_search("gradual pruning", PAPERS[1:2]), web_fetch(PAPERS[1][0]),
              cited("Linear schedules lag behind cubic ones.", PAPERS[1][0], "Linear schedules lag."),
              tool_use("submit_plan", {"markdown": PLAN})),
        reply(text("Done.")))
    run_id = _start_planner(app, number)
    worker()
    assert _web_tools_of(fake_anthropic.requests[0])[1]["citations"] == {"enabled": True}
    citation = next(b for b in fake_anthropic.responses[0]["content"] if b.get("citations"))["citations"][0]
    assert citation["type"] == "char_location" and citation["document_title"] == "Gradual pruning revisited"
    with app.app_context():
        assert _run(run_id).status == "awaiting_approval", _run(run_id).last_error
        sources = experiments.get_experiment(number).plan_md.split("## Sources", 1)[1]
        assert "[Gradual pruning revisited](<https://openreview.net/forum?id=abc>)" in sources
