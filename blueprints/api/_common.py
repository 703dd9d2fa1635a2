"""What every API resource module shares: its route table, reading the JSON body, the one
camelCase ⇔ snake_case mapping of field names, and query-argument parsing.

The API answers in camelCase (`podAccount`), while the services take snake_case
(`pod_account`). A body may spell each field either way, so a client can send back what
it read; `fields_of` turns both spellings into the service's name, and a body that gives one
field twice with different values is refused instead of one value quietly winning.

A field the API renamed (`RENAMED_FIELDS`) is still taken under its old name for now: the
answer then carries `Deprecation: true` and a `warnings` list saying which name replaces
it (docs/api.md, "Deprecated field names").
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from flask import Blueprint, Response, current_app, g, request

from services.core import input_shape
from services.core.errors import Unprocessable, ValidationError

_HUMP = re.compile(r"(?<=[a-z0-9])([A-Z])")


def snake_name(api_name: str) -> str:
    """`podAccount` → `pod_account`; a name without capitals is returned as it is."""
    return _HUMP.sub(lambda m: "_" + m.group(1).lower(), api_name)


def api_name(snake: str) -> str:
    """`pod_account` → `podAccount`: the spelling the API answers with."""
    head, *rest = snake.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _same(a, b) -> bool:
    # `True == 1` in Python; two spellings that disagree in type do not agree.
    return type(a) is type(b) and a == b


# Fields the API renamed: old snake_case name → new. The old name is still taken where the
# new one is, and still emitted beside it, until clients have moved (docs/api.md).
RENAMED_FIELDS = {"runpod_account": "pod_account"}


def fields_of(data: dict, accepted: Iterable[str], deprecated_used: list[str] | None = None) -> dict:
    """The body with every `accepted` field under its snake_case name, whichever way it came.

    A key whose snake_case form is not accepted keeps the client's own spelling, so the
    service's "Unknown field(s): …" names what the client actually sent. An old name of a
    renamed field counts as the new one, and is added to `deprecated_used` as sent.
    """
    accepted = set(accepted)
    cleaned: dict = {}
    spelled_as: dict[str, str] = {}
    old_spellings: set[str] = set()
    for key, value in data.items():
        name = snake_name(key) if isinstance(key, str) else key
        if RENAMED_FIELDS.get(name) in accepted:
            name = RENAMED_FIELDS[name]
            old_spellings.add(key)
            if deprecated_used is not None:
                deprecated_used.append(key)
        if name not in accepted:
            name = key
        if name in cleaned:
            if not _same(cleaned[name], value):
                if {key, spelled_as[name]} & old_spellings:
                    # Not a typo of one field but two names a client meant differently: the
                    # old one is on its way out, so say which one counts rather than pick.
                    raise Unprocessable(
                        f"{spelled_as[name]} and {key} name one field (the old name is deprecated) with "
                        f"different values; send {api_name(name)} only.", code="conflicting_fields",
                        field=name)
                raise ValidationError(
                    f"{spelled_as[name]} and {key} are two spellings of one field with different values; "
                    "send it once.", field=name, code="conflicting_fields")
            continue
        cleaned[name] = value
        spelled_as[name] = key
    return cleaned


def json_body() -> dict:
    """The request's JSON object, or a clear 400."""
    if not request.data:
        raise ValidationError("Send a JSON object body (Content-Type: application/json).", code="invalid_json")
    data = input_shape.parse_json(request.get_data())
    if not isinstance(data, dict):
        raise ValidationError("The body must be a JSON object.", code="invalid_json")
    return data


def body_fields(accepted: Iterable[str]) -> dict:
    """The JSON object body with its `accepted` fields in snake_case (see `fields_of`); an old
    field name it used is remembered for the answer's deprecation notice."""
    return fields_of(json_body(), accepted, g.setdefault("deprecated_fields", []))


def deprecation_notice(response: Response) -> Response:
    """An answer to a request that used a deprecated field name: `Deprecation: true` (RFC 9745)
    and, in a JSON object body, `warnings` naming the replacement."""
    used = g.get("deprecated_fields")
    if not used:
        return response
    response.headers["Deprecation"] = "true"
    body = response.get_json(silent=True) if response.is_json else None
    if isinstance(body, dict):
        warnings = [f"{key} is deprecated; use {api_name(RENAMED_FIELDS[snake_name(key)])}" for key in used]
        body["warnings"] = [*body.get("warnings", []), *warnings]
        response.set_data(current_app.json.dumps(body))
    return response


def int_arg(name: str, default: int, low: int, high: int) -> int:
    """A whole-number query argument in [low, high], `default` when absent; else a 400."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = None
    if value is None or not low <= value <= high:
        raise ValidationError(f"{name} must be a whole number from {low} to {high}.", field=name)
    return value


def iso(moment) -> str | None:
    """A timestamp as ISO-8601 text, None when there is none."""
    return moment.isoformat() if moment else None


def id_text(value) -> str | None:
    """A uuid as text, None when there is none."""
    return str(value) if value else None


@dataclass
class Routes:
    """One resource module's routes, added to the API blueprint by `blueprints/api/__init__.py`.

    Each module lists its own routes with the usual decorators, and the package registers
    every module by name, so no module is imported only for what importing it does.
    """

    rules: list[tuple[str, str, Callable]] = field(default_factory=list)

    def route(self, method: str, path: str) -> Callable:
        def decorator(view: Callable) -> Callable:
            self.rules.append((method, path, view))
            return view
        return decorator

    def get(self, path: str) -> Callable:
        return self.route("GET", path)

    def post(self, path: str) -> Callable:
        return self.route("POST", path)

    def patch(self, path: str) -> Callable:
        return self.route("PATCH", path)

    def register_on(self, bp: Blueprint) -> None:
        for method, path, view in self.rules:
            bp.add_url_rule(path, view_func=view, methods=[method])
