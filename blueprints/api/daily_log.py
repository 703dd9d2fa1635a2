"""The daily log (SPEC §12.3): the newest entries, one day's entry, and writing a day now."""
from __future__ import annotations

from flask import request

from blueprints import access
from blueprints._actions import commit_then_run
from blueprints.api._common import Routes, body_fields, int_arg
from services.core.errors import ValidationError
from services.day import daily_log

routes = Routes()


@routes.get("/daily-log")
@access.api("read")
def list_daily_log():
    """With `day=YYYY-MM-DD`, that day's entry (404 before it is written); else the newest entries."""
    if "day" in request.args:
        return {"entry": daily_log.to_json(daily_log.entry_for(request.args["day"]))}
    entries = daily_log.newest(int_arg("limit", 30, 1, 366), int_arg("offset", 0, 0, 1_000_000))
    return {"entries": [daily_log.to_json(entry, full=False) for entry in entries]}


@routes.post("/daily-log")
@access.api("write")
def write_daily_log():
    """Write (or rewrite) `day`'s entry from the record now; `day` defaults to today (so far)."""
    data = body_fields(("day",))
    unknown = sorted(set(data) - {"day"})
    if unknown:
        raise ValidationError(f"Unknown field(s): {', '.join(map(str, unknown))[:200]}.", field=str(unknown[0]))
    day = daily_log.parse_day(data["day"]) if "day" in data else daily_log.today()
    entry = daily_log.write(day, "token" if access.actor().kind == "token" else "owner")
    commit_then_run()
    return {"entry": daily_log.to_json(entry)}
