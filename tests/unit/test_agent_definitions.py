"""Agent definitions: every shipped file parses, names only known tools, and a broken one
breaks only itself."""
import types

import pytest

from services.agents import code_tools, toolbox
from services.agents.toolkit import ToolResult, tool
from services.claude import loader
from services.core.errors import ValidationError


@pytest.mark.parametrize("name", loader.names())
def test_every_shipped_agent_parses(name):
    """Does each agents/*.md parse, with its file name as its name and known tools only?"""
    definition = loader.get(name)
    assert definition.name == name and definition.tools and definition.prompt
    assert toolbox.unknown_tools(definition) == []


def test_start_up_refuses_an_agent_naming_a_tool_no_module_defines(monkeypatch, tmp_path):
    """Does the start-up check stop on a shipped definition that lists an unknown tool, naming
    the file and the tool, and pass on the real agents?"""
    toolbox.check_agent_definitions()
    (tmp_path / "rogue.md").write_text(
        "---\nname: rogue\ndescription: d\nmodel: m\nmax_turns: 3\ntools: [get_plan, launch_rockets]\n---\nbody")
    monkeypatch.setattr(loader, "AGENTS_DIR", tmp_path)
    loader._load.cache_clear()
    try:
        with pytest.raises(RuntimeError, match=r"agents/rogue.md: unknown tool\(s\) launch_rockets"):
            toolbox.check_agent_definitions()
    finally:
        loader._load.cache_clear()


def test_bad_frontmatter_is_refused():
    """Missing fields, unknown tools and bad turn limits are clear errors."""
    with pytest.raises(ValidationError, match="frontmatter"):
        loader.parse("no frontmatter here")
    with pytest.raises(ValidationError, match="lacks"):
        loader.parse("---\nname: x\n---\nbody")
    with pytest.raises(ValidationError, match="unknown tool"):
        toolbox.check_definition(loader.parse(
            "---\nname: x\ndescription: d\nmodel: m\nmax_turns: 3\ntools: [launch_rockets]\n---\nbody"))
    with pytest.raises(ValidationError, match="tools must be a list"):
        loader.parse("---\nname: x\ndescription: d\nmodel: m\nmax_turns: 3\ntools: get_plan\n---\nbody")
    with pytest.raises(ValidationError, match="max_turns"):
        loader.parse("---\nname: x\ndescription: d\nmodel: m\nmax_turns: 0\ntools: [get_plan]\n---\nbody")


def test_effort_is_high_for_the_planner_and_critics_and_medium_elsewhere():
    """Does each shipped agent declare its effort: high for the planner and the critics?"""
    for name in loader.names():
        expected = "high" if name == "experiment-planner" or name.endswith("-critic") else "medium"
        assert loader.get(name).effort == expected, name


def test_effort_defaults_to_medium_and_must_be_known():
    """A definition without effort gets medium; an unknown effort is a clear error."""
    base = "---\nname: x\ndescription: d\nmodel: m\nmax_turns: 3\ntools: [get_plan]\n"
    assert loader.parse(base + "---\nbody").effort == "medium"
    assert loader.parse(base + "effort: max\n---\nbody").effort == "max"
    with pytest.raises(ValidationError, match="effort must be one of low, medium, high, xhigh, max"):
        loader.parse(base + "effort: turbo\n---\nbody")


def test_the_worktree_tools_the_router_knows_are_the_code_tools():
    """Is every name in loader.CODE_TOOLS (which sends an agent to the worktree host) a tool
    that code_tools defines, and every tool code_tools defines in it?"""
    defined = set(toolbox.collect((code_tools,)))
    assert defined == set(loader.CODE_TOOLS)


def test_two_tools_with_one_name_are_refused():
    """Does collecting the tools refuse a name that two modules define, rather than let the
    later one silently replace the other?"""
    first, second = types.ModuleType("first"), types.ModuleType("second")
    first.ping = tool("ping", "One.")(lambda ctx, data: ToolResult("one"))
    second.ping_too = tool("ping", "Two.")(lambda ctx, data: ToolResult("two"))
    assert list(toolbox.collect((first,))) == ["ping"]
    with pytest.raises(RuntimeError, match="Two tools are named 'ping'"):
        toolbox.collect((first, second))
