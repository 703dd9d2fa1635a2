"""The literature library as agent evidence, through the real tool registry: search_literature
and read_literature, offered to the planner and the analyzer."""
from __future__ import annotations

import json

from models import db
from services.claude import loader
from services.research import literature, literature_agent
from tests.conftest import csrf_from
from tests.fakes.anthropic_server import reply, text, tool_use
from tests.integration.code_fixtures import call, tool_context



def test_the_planner_and_the_analyzer_are_offered_the_library():
    """Do the planner's and the analyzer's definitions list both literature tools?"""
    for agent in ("experiment-planner", "analyzer"):
        tools = loader.get(agent).tools
        assert {"search_literature", "read_literature"} <= set(tools), agent


def test_search_then_read_an_item(app, make_experiment):
    """Does search_literature find an item by its notes and read_literature return its reasons and a citation?"""
    with app.app_context():
        added = literature.add({"title": "Toy models of superposition", "authors": ["Nelson Elhage"], "year": 2022,
                                "arxiv_id": "2209.10652", "notes": "Polysemantic neurons everywhere",
                                "threat_reason_md": "Undercuts the monosemantic belief."})
        literature.add({"title": "Unrelated", "authors": ["Someone Else"]})
        db.session.commit()
        ctx = tool_context(make_experiment("Plan me"), "experiment-planner")
        found = json.loads(call(ctx, "search_literature", text="polysemantic").content)["items"]
        assert [i["title"] for i in found] == ["Toy models of superposition"]
        assert found[0]["cite"] == "Elhage 2022, “Toy models of superposition” (arXiv:2209.10652)"
        record = json.loads(call(ctx, "read_literature", id=found[0]["id"]).content)
        assert record["threatReasonMd"] == "Undercuts the monosemantic belief." and record["id"] == str(added.item.id)


def test_bad_literature_tool_input_is_an_error_result(app, make_experiment):
    """Do an empty search, an unknown read state and an unknown id come back as error results, not crashes?"""
    with app.app_context():
        ctx = tool_context(make_experiment("Plan me"), "analyzer")
        assert call(ctx, "search_literature").is_error
        assert call(ctx, "search_literature", text="x", read_state="skimmed").is_error
        missing = call(ctx, "read_literature", id="not-an-id")
        assert missing.is_error and "No such literature item" in missing.content
        assert "No item in the library matches" in call(ctx, "search_literature", text="nothing").content


def test_the_literature_agent_writes_the_assessment_and_ranks_the_queue(app, client, owner, fake_anthropic, worker):
    """From the item page: does the agent's run (real loop, fake model) write the summary, reasons
    and score against the project's beliefs, rank another unread item, and show on the page?"""
    from models import Belief, Project
    with app.app_context():
        project = Project(slug="interp", title="Interpretability")
        db.session.add(project)
        db.session.flush()
        db.session.add(Belief(number=3, project_id=project.id, title="Features are monosemantic",
                              current_belief="SAE features are mostly monosemantic.", status="active"))
        item = literature.add({"title": "Toy models of superposition", "authors": ["Nelson Elhage"],
                               "project_id": project.id}).item
        other = literature.add({"title": "Another unread paper", "authors": ["Ann Other"]}).item
        db.session.commit()
        item_id, other_id = str(item.id), str(other.id)
    fake_anthropic.script(
        reply(tool_use("read_literature", {"id": item_id}), tool_use("list_beliefs", {})),
        reply(tool_use("write_literature_assessment", {
            "summary_md": "Shows **superposition** in toy models.", "relevance_reason_md": "Bears on belief 3.",
            "threat_reason_md": "Undercuts belief 3: features share neurons.", "score": 0.8})),
        reply(tool_use("rank_literature", {"scores": [{"id": other_id, "score": 0.3}]})),
        reply(text("Done.")))
    page = client.get(f"/library/{item_id}")
    started = client.post(f"/library/{item_id}/assess", data={"csrf_token": csrf_from(page.text)})
    assert started.status_code == 303
    assert "Claude is reading it" in client.get(f"/library/{item_id}").text
    worker()
    with app.app_context():
        row = literature.get_item(item_id)
        assert (row.summary_md, row.threat_reason_md, row.score) == (
            "Shows **superposition** in toy models.", "Undercuts belief 3: features share neurons.", 0.8)
        assert literature.get_item(other_id).score == 0.3
        run_id = literature_agent.latest_run(row).id
    sent = fake_anthropic.requests[1].body["messages"][-1]["content"]
    assert "Features are monosemantic" in sent[1]["content"]
    shown = client.get(f"/library/{item_id}").text
    assert "<strong>superposition</strong>" in shown and "Ask Claude again" in shown
    assert client.get(f"/runs/{run_id}").status_code == 200 and client.get("/runs").status_code == 200


def test_the_literature_agent_needs_a_key_and_runs_once_at_a_time(app, client, owner):
    """Without a model key, is asking refused with the reason (and no run made)?"""
    with app.app_context():
        item_id = str(literature.add({"title": "A paper"}).item.id)
        db.session.commit()
    saved, app.config["ANTHROPIC_API_KEY"] = app.config.get("ANTHROPIC_API_KEY"), ""
    try:
        page = client.get(f"/library/{item_id}")
        refused = client.post(f"/library/{item_id}/assess", data={"csrf_token": csrf_from(page.text)})
    finally:
        app.config["ANTHROPIC_API_KEY"] = saved
    assert refused.status_code == 422 and "No ANTHROPIC_API_KEY" in refused.text
    with app.app_context():
        assert literature_agent.latest_run(literature.get_item(item_id)) is None


def test_the_assessment_tools_refuse_out_of_range_and_read_items(app, make_experiment):
    """Are a score outside 0–1, ranking a read item, and a run not about an item refused as tool errors?"""
    from services.agents import toolkit
    from services.workflow import runs
    with app.app_context():
        item = literature.add({"title": "Scoped"}).item
        done = literature.add({"title": "Read already", "read_state": "read"}).item
        run = runs.create_run(kind="apply", agent="literature", request="r", scope_id=item.id, scope_kind="literature")
        db.session.commit()
        ctx = toolkit.ToolContext(run, None)
        assert call(ctx, "write_literature_assessment", summary_md="s", relevance_reason_md="r",
                    threat_reason_md="t", score=3).is_error
        assert call(ctx, "rank_literature", scores=[{"id": str(done.id), "score": 0.5}]).is_error
        planner = tool_context(make_experiment("Plan"), "experiment-planner")
        assert "not about a literature item" in call(planner, "list_beliefs").content
