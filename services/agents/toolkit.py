"""What every agent tool is made of: its result, the context it runs in, its definition and
the `@tool` decorator, and the check of its input against its schema.

`@tool` only marks a handler with its definition; it registers nothing. The tools an agent
can call are the ones services.agents.toolbox collects from the modules it names, so no
module has to be imported for its side effect.
"""
from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Callable

from models import AgentRun, Experiment
from services.core.actors import Actor
from services.core.errors import ValidationError
from services.core.redact import redact

RESULT_MAX = 64 * 1024


@dataclass
class ToolResult:
    content: str
    is_error: bool = False
    park: dict | None = None          # e.g. {"children": [...]}, {"until": iso}, {"dispatch": "…"}
    effects: list = field(default_factory=list)  # side effects to run after commit
    enqueue: list = field(default_factory=list)  # run ids to enqueue after commit
    # The run ends with this tool call, in the same commit: nothing that reacts to the
    # tool (an owner answering the questions) can find the run still "running".
    finish: bool = False
    # (media type, bytes) of figures the model should see: image blocks after the text.
    images: list = field(default_factory=list)

    def api_content(self) -> str | list[dict]:
        """The tool_result's `content` for the Messages API: the text (redacted), followed by
        base64 image blocks when the tool returned figures."""
        text = redact(self.content)
        if not self.images:
            return text
        return [{"type": "text", "text": text}] + [
            {"type": "image", "source": {"type": "base64", "media_type": media_type,
                                         "data": base64.b64encode(data).decode()}}
            for media_type, data in self.images]


@dataclass
class ToolContext:
    run: AgentRun
    experiment: Experiment | None

    @property
    def actor(self) -> Actor:
        return Actor("agent", str(self.run.id), self.run.agent)

    def need_experiment(self) -> Experiment:
        if self.experiment is None:
            raise ValidationError("This run has no experiment.")
        return self.experiment


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    schema: dict
    handler: Callable[[ToolContext, dict], ToolResult]
    # The handler commits its reads and wraps its own writes: for tools that run long work
    # without the database (git, the sandbox), which must not hold a transaction meanwhile.
    own_transaction: bool = False
    # A server tool (web search, web fetch) runs inside the model call on the API's side:
    # its request entry comes from web_tools, and Sagan never executes it.
    server: bool = False

    def as_api(self) -> dict:
        return {"name": self.name, "description": self.description, "input_schema": self.schema}


def tool(name: str, description: str, properties: dict | None = None, required: list | None = None, *,
         own_transaction: bool = False):
    """Mark `handler` as the tool `name`: its definition is `handler.tool` (see toolbox)."""
    schema = {"type": "object", "properties": properties or {}, "required": required or [],
              "additionalProperties": False}

    def mark(handler):
        handler.tool = Tool(name, description, schema, handler, own_transaction)
        return handler
    return mark


# --- input validation (the subset of JSON Schema the tool schemas use) ----------------------

_TYPES = {"string": str, "integer": int, "boolean": bool, "array": list, "object": dict, "number": (int, float)}


def validate_input(schema: dict, data) -> dict:
    if not isinstance(data, dict):
        raise ValidationError("Tool input must be a JSON object.")
    props = schema.get("properties", {})
    missing = [k for k in schema.get("required", []) if k not in data]
    if missing:
        raise ValidationError(f"Missing required input: {', '.join(missing)}.")
    extra = [k for k in data if k not in props]
    if extra and schema.get("additionalProperties") is False:
        raise ValidationError(f"Unknown input: {', '.join(extra)}; allowed: {', '.join(props) or 'none'}.")
    for key, value in data.items():
        spec = props.get(key, {})
        expected = _TYPES.get(spec.get("type"))
        if expected and (not isinstance(value, expected) or (spec.get("type") == "integer" and isinstance(value, bool))):
            raise ValidationError(f"{key} must be {spec['type']}.")
        if "enum" in spec and value not in spec["enum"]:
            raise ValidationError(f"{key} must be one of: {', '.join(map(str, spec['enum']))}.")
        if spec.get("type") == "string" and len(value) > spec.get("maxLength", 200_000):
            raise ValidationError(f"{key} is too long (max {spec.get('maxLength')} characters).")
    return data
