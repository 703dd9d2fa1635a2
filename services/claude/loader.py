"""Agent definitions: `agents/<name>.md` — YAML frontmatter plus the system prompt.

Frontmatter: `name`, `description`, `model`, `max_turns`, `tools` (an allowlist of tool
names) and `effort` (low, medium, high, xhigh or max: how hard the model thinks; medium when
absent). SAGAN_AGENT_MODEL overrides every agent's model (e.g. for a cheaper test model).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml
from flask import current_app

from services.core.errors import NotFound, ValidationError

AGENTS_DIR = Path(__file__).resolve().parents[2] / "agents"
EFFORTS = ("low", "medium", "high", "xhigh", "max")  # output_config.effort (Messages API)
DEFAULT_EFFORT = "medium"
# The code tools (services/agents/code_tools.py): an agent listing any of them works in a
# worktree, so its runs go to the host that has the worktrees (services.workflow.jobs.job_for).
CODE_TOOLS = ("list_files", "read_file", "search", "write_file", "apply_patch", "run_command",
              "git_diff", "git_commit", "git_push")


@dataclass(frozen=True)
class AgentDefinition:
    name: str
    description: str
    model: str
    max_turns: int
    tools: tuple[str, ...]
    prompt: str
    effort: str = DEFAULT_EFFORT


def parse(text: str, source: str = "<agent>") -> AgentDefinition:
    if not text.startswith("---\n"):
        raise ValidationError(f"{source}: an agent file starts with YAML frontmatter between --- lines.")
    try:
        front, body = text[4:].split("\n---\n", 1)
        meta = yaml.safe_load(front) or {}
    except (ValueError, yaml.YAMLError) as exc:
        raise ValidationError(f"{source}: bad frontmatter: {exc}") from exc
    missing = [k for k in ("name", "description", "model", "max_turns", "tools") if k not in meta]
    if missing:
        raise ValidationError(f"{source}: frontmatter lacks {', '.join(missing)}.")
    # Tool names are checked against the tool registry by the registry itself
    # (toolbox.check_agent_definitions, run at start-up): the tool modules read agent
    # definitions, so the loader stays below them and imports none.
    if not isinstance(meta["tools"], list) or not all(isinstance(t, str) for t in meta["tools"]):
        raise ValidationError(f"{source}: tools must be a list of tool names.")
    if not isinstance(meta["max_turns"], int) or not 1 <= meta["max_turns"] <= 500:
        raise ValidationError(f"{source}: max_turns must be 1–500.")
    effort = meta.get("effort", DEFAULT_EFFORT)
    if effort not in EFFORTS:
        raise ValidationError(f"{source}: effort must be one of {', '.join(EFFORTS)}; got {effort!r}.")
    return AgentDefinition(str(meta["name"]), str(meta["description"]), str(meta["model"]),
                           meta["max_turns"], tuple(meta["tools"]), body.strip(), effort)


@lru_cache(maxsize=64)
def _load(name: str) -> AgentDefinition:
    # One file per agent, loaded on its own: a broken definition breaks only that agent.
    path = AGENTS_DIR / f"{name}.md"
    if not path.is_file() or path.parent != AGENTS_DIR:
        raise NotFound(f"No agent named {name!r}; known: {', '.join(names())}.")
    definition = parse(path.read_text(encoding="utf-8"), path.name)
    if definition.name != name:
        raise ValidationError(f"{path.name}: its frontmatter names it {definition.name!r}.")
    return definition


def names() -> list[str]:
    return sorted(path.stem for path in AGENTS_DIR.glob("*.md"))


def get(name: str) -> AgentDefinition:
    if not isinstance(name, str) or "/" in name or name.startswith("."):
        raise NotFound(f"No agent named {name!r}.")
    return _load(name)


def model_for(definition: AgentDefinition) -> str:
    return current_app.config.get("SAGAN_AGENT_MODEL") or definition.model


def is_code_agent(tools: tuple[str, ...] | list[str]) -> bool:
    """Does an agent with these tools need the host that has the worktrees?"""
    return any(name in CODE_TOOLS for name in tools)
