"""The literature library as agent evidence, through the real tool registry: search_literature
and read_literature, offered to the planner and the analyzer."""
from __future__ import annotations

import json

from models import db
from services.claude import loader
from services.research import literature
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
