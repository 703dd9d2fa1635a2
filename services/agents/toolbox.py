"""Every tool an agent may call, by name, and the one way to call one.

The tools are collected from the modules that define them, listed here: adding a tool
module means adding it to TOOL_MODULES (and a test fails for a definition naming a tool
that is not collected: services.agents.loader checks every agent's tools against TOOLS).
"""
from __future__ import annotations

from inspect import isfunction
from types import ModuleType

from models import db
from services.agents import analysis, code_tools, implementation, repo_tools, research_tools, tools, web_tools
from services.agents.toolkit import RESULT_MAX, Tool, ToolContext, ToolResult, validate_input
from services.errors import SaganError

TOOL_MODULES = (tools, analysis, code_tools, implementation, repo_tools, research_tools)


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


def request_tools(names) -> list[dict]:
    """The `tools` of a request for an agent allowed `names`: Sagan's own tools, then the
    server tools the owner has on (Settings → Web research)."""
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
