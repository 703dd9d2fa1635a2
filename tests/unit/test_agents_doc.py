"""docs/agents.md's table stays equal to the agents' frontmatter."""
import re
from pathlib import Path

from services.agents import toolbox
from services.claude import loader

DOC = Path(__file__).resolve().parents[2] / "docs" / "agents.md"


def test_the_agents_table_lists_every_agent_with_exactly_its_tools():
    rows = dict(re.findall(r"^\| `([a-z-]+)` \| ([a-z_, ]+) \|$", DOC.read_text(), flags=re.M))
    assert rows, "no agent rows found in docs/agents.md"
    assert sorted(rows) == loader.names()
    for name, listed in rows.items():
        assert tuple(t.strip() for t in listed.split(",")) == loader.get(name).tools, name


def test_every_registered_tool_is_described():
    text = DOC.read_text()
    missing = [name for name in toolbox.TOOLS if f"`{name}`" not in text]
    assert not missing, f"docs/agents.md does not describe: {', '.join(missing)}"
