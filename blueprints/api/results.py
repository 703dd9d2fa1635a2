"""Clean results and promotion (SPEC §8.1–8.4, §9.2)."""
from __future__ import annotations

from flask import request

from blueprints import access
from blueprints._actions import commit_then_run
from blueprints.api._common import Routes, body_fields
from blueprints.api.experiments import experiment_summary
from services.core.errors import ValidationError
from services.results import results
from services.workflow import experiments

routes = Routes()

CLEAN_RESULT_FIELDS = ("html", "body", "title")
PROMOTE_FIELDS = ("to", "note", "confirm_lint", "expected_status")


def lint_json(report) -> dict | None:
    return report.as_json() if report is not None else None


@routes.patch("/clean-results/<ref>")
@access.api("write")
def patch_clean_result(ref: str):
    """Set the clean result's body (`html`, alias `body`) and/or `title`: sanitized, versioned, linted."""
    experiment = experiments.get_experiment(ref)
    data = body_fields(CLEAN_RESULT_FIELDS)
    unknown = set(data) - set(CLEAN_RESULT_FIELDS)
    if unknown:
        raise ValidationError(f"Unknown field(s): {', '.join(sorted(unknown))}; send html and/or title.",
                              field=sorted(unknown)[0])
    html = data.get("html", data.get("body"))
    if html is not None and not isinstance(html, str):
        raise ValidationError("html must be a string of HTML.", field="html")
    if "title" in data and not isinstance(data["title"], str):
        raise ValidationError("title must be a string.", field="title")
    saved = results.save_clean_result(experiment, html, access.actor(), title=data.get("title"))
    commit_then_run()
    return {"ok": True, "version": saved.version, "changed": saved.changed, "lint": lint_json(saved.report),
            "experiment": {"id": str(experiment.id), "number": experiment.number, "title": experiment.title,
                           "status": experiment.status, "hasCleanResult": experiment.has_clean_result}}


@routes.post("/experiments/<ref>/promote")
@access.api("write+promote")
def promote_experiment(ref: str):
    """Promote the clean result (`to`: shared | completed); 409 lint_failed unless `confirm_lint`."""
    experiment = experiments.get_experiment(ref)
    data = body_fields(PROMOTE_FIELDS) if request.data else {}
    confirm = data.get("confirm_lint", False)
    if not isinstance(confirm, bool):
        raise ValidationError("confirm_lint must be true or false.", field="confirm_lint")
    note = data.get("note")
    if note is not None and not isinstance(note, str):
        raise ValidationError("note must be text.", field="note")
    to = data.get("to", "shared")
    if not isinstance(to, str):
        raise ValidationError("to must be shared or completed.", field="to")
    actor = access.actor()
    effects = results.promote(experiment, to, actor, confirm_lint=confirm, note=note,
                              expected_status=data.get("expected_status"),
                              scope_grant="promote" if actor.kind == "token" else None)
    commit_then_run(effects)
    return {"ok": True, "experiment": experiment_summary(experiment),
            "lint": lint_json(results.report_for(experiment))}
