"""Every tool an agent may call, by name, and the one way to call one.

The tools are collected from the modules that define them, listed here: adding a tool
module means adding it to TOOL_MODULES (and a test fails for a definition naming a tool
that is not collected: services.agents.loader checks every agent's tools against TOOLS).
"""
from __future__ import annotations

from inspect import isfunction
from types import ModuleType

from models import db
from services.agents import analysis, code_tools, implementation, repo_tools, research_tools, tools
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


TOOLS: dict[str, Tool] = collect(TOOL_MODULES)


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
