"""Agent definitions: `agents/<name>.md` — YAML frontmatter plus the system prompt.

Frontmatter: `name`, `description`, `model`, `max_turns`, `tools` (an allowlist of tool
names). SAGAN_AGENT_MODEL overrides every agent's model (e.g. for a cheaper test model).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml
from flask import current_app

from services.errors import NotFound, ValidationError

AGENTS_DIR = Path(__file__).resolve().parents[2] / "agents"


@dataclass(frozen=True)
class AgentDefinition:
    name: str
    description: str
    model: str
    max_turns: int
    tools: tuple[str, ...]
    prompt: str


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
    from services.agents.tools import TOOLS
    unknown = [t for t in meta["tools"] if t not in TOOLS]
    if unknown:
        raise ValidationError(f"{source}: unknown tool(s) {', '.join(unknown)}.")
    if not isinstance(meta["max_turns"], int) or not 1 <= meta["max_turns"] <= 500:
        raise ValidationError(f"{source}: max_turns must be 1–500.")
    return AgentDefinition(str(meta["name"]), str(meta["description"]), str(meta["model"]),
                           meta["max_turns"], tuple(meta["tools"]), body.strip())


@lru_cache(maxsize=1)
def _all() -> dict[str, AgentDefinition]:
    definitions = {}
    for path in sorted(AGENTS_DIR.glob("*.md")):
        definition = parse(path.read_text(encoding="utf-8"), path.name)
        definitions[definition.name] = definition
    return definitions


def names() -> list[str]:
    return sorted(_all())


def get(name: str) -> AgentDefinition:
    try:
        return _all()[name]
    except KeyError:
        raise NotFound(f"No agent named {name!r}; known: {', '.join(names())}.") from None


def model_for(definition: AgentDefinition) -> str:
    return current_app.config.get("SAGAN_AGENT_MODEL") or definition.model
