"""Every tool an agent may call, by name, and the one way to call one.

The tools are collected from the modules that define them, listed here: adding a tool
module means adding it to TOOL_MODULES. Every agent definition's tools are checked against
TOOLS when the app starts (`check_agent_definitions`), so a definition naming a tool that is
not collected stops start-up with its file and the unknown names.
"""
from __future__ import annotations

from inspect import isfunction
from types import ModuleType

from models import db
from services.agents import (
    analysis,
    belief_tools,
    code_tools,
    ideation_tools,
    implementation,
    literature_tools,
    repo_tools,
    research_tools,
    review_tools,
    tools,
    web_tools,
)
from services.agents.toolkit import RESULT_MAX, Tool, ToolContext, ToolResult, validate_input
from services.claude import loader
from services.core.errors import SaganError, ValidationError

TOOL_MODULES = (tools, analysis, code_tools, implementation, repo_tools, research_tools, belief_tools,
                literature_tools, review_tools, ideation_tools)


def collect(modules: tuple[ModuleType, ...]) -> dict[str, Tool]:
    """The tools the modules define (functions marked by `@tool`), by name; a name defined
    twice is an error, not a silent override."""
    found: dict[str, Tool] = {}
    for module in modules:
        for value in vars(module).values():
            definition = getattr(value, "tool", None) if isfunction(value) else None
            if not isinstance(definition, Tool):
                continue
            if found.get(definition.name, definition) is not definition:
                raise RuntimeError(f"Two tools are named {definition.name!r} ({module.__name__}).")
            found[definition.name] = definition
    return found


def _runs_on_the_api(ctx: ToolContext, data: dict) -> ToolResult:
    return ToolResult("This tool runs on the model API's side (a server tool); it is not called as a "
                      "client tool.", is_error=True)


# Web search and web fetch run inside the model call (Anthropic's server tools): named here so
# an agent definition can allow them; their request entries come from web_tools.
SERVER_TOOLS = {name: Tool(name, description, {"type": "object", "properties": {}}, _runs_on_the_api, server=True)
                for name, description in (
                    ("web_search", "Search the web (Anthropic's server-side web search)."),
                    ("web_fetch", "Fetch a web page or PDF (Anthropic's server-side web fetch)."))}

TOOLS: dict[str, Tool] = collect(TOOL_MODULES) | SERVER_TOOLS


def unknown_tools(definition: loader.AgentDefinition) -> list[str]:
    return [name for name in definition.tools if name not in TOOLS]


def check_definition(definition: loader.AgentDefinition, source: str = "") -> loader.AgentDefinition:
    """`definition`, or a clear error naming the tools it lists that no module defines."""
    unknown = unknown_tools(definition)
    if unknown:
        raise ValidationError(f"{source or definition.name}: unknown tool(s) {', '.join(unknown)}.")
    return definition


def check_agent_definitions() -> None:
    """Every shipped agent names only collected tools (start-up: a typo is the developer's,
    found before any run rather than when that agent is first asked for)."""
    for name in loader.names():
        try:
            check_definition(loader.get(name), f"agents/{name}.md")
        except ValidationError as exc:
            raise RuntimeError(exc.message) from exc


def request_tools(names) -> list[dict]:
    """The `tools` of a request for an agent allowed `names`: Sagan's own tools, then the
    server tools the owner has on (Settings → Web research)."""
    unknown = [name for name in names if name not in TOOLS]
    if unknown:
        raise ValidationError(f"Unknown tool(s) {', '.join(unknown)}: no tool module defines them.")
    own = [TOOLS[name].as_api() for name in names if not TOOLS[name].server]
    return own + web_tools.request_tools([name for name in names if TOOLS[name].server])


def call(ctx: ToolContext, name: str, data) -> ToolResult:
    """Run one tool call; domain errors come back as error results the model can read."""
    definition = TOOLS.get(name)
    if definition is None:
        return ToolResult(f"Unknown tool {name!r}.", is_error=True)
    try:
        if definition.own_transaction:
            result = definition.handler(ctx, validate_input(definition.schema, data))
        else:
            with db.session.begin_nested():  # a failed tool leaves nothing half-written
                result = definition.handler(ctx, validate_input(definition.schema, data))
    except SaganError as exc:
        return ToolResult(f"{exc.code}: {exc.message}", is_error=True)
    if len(result.content.encode()) > RESULT_MAX:
        size = len(result.content.encode())
        result.content = result.content.encode()[:RESULT_MAX].decode(errors="ignore") + \
            f"\n… [truncated: {size:,} bytes in all]"
    return result
