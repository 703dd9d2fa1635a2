"""The experiment page's view model: what `experiments/detail.html` shows,
gathered in one place, with one `errors` mapping for the refusals next to their forms and
one `drafts` mapping for what the owner typed, so a refused form keeps its text.

Both survive post/redirect/get: a refused full-page form stashes them (`refuse`) and the
next GET of the page shows them once (`ExperimentPage.for_request`)."""
from __future__ import annotations

from dataclasses import dataclass, field

from flask import current_app, redirect, request, url_for

from blueprints import _actions, experiment_panels
from models import Experiment
from services.core import events, registry
from services.core.errors import SaganError
from services.planning import approvals, questions
from services.planning.plans import template as plan_template
from services.research import projects
from services.results import results
from services.workflow import experiments, lifecycle, markers, stages

# The forms of the page, by the key of their refusal in `errors` (and the section they sit in).
FORM_SECTIONS = {"status": "status", "override": "status", "edit": "record", "plan": "plan",
                 "answer": "questions", "result": "clean-result", "preview": "clean-result",
                 "promote": "clean-result", "figure": "clean-result", "follow_up": "follow-ups"}
DRAFT_NAMES = ("plan_text", "answers", "draft_html", "draft_title", "follow_up_form",
               "preview_url", "preview_report", "override_to", "override_note", "status_to", "status_note")



class PageError:
    """A refusal shown next to its form: prints as its sentence; `field` marks the input."""

    def __init__(self, message: str, field: str | None = None):
        self.message, self.field = message, field

    def __str__(self) -> str:
        return self.message

    def as_dict(self) -> dict:
        return {"message": self.message, "field": self.field}


def _stash_name(number: int) -> str:
    return f"experiment:{number}"


def timeline_filters() -> dict:
    """Timeline filters from the query string; unknown values are dropped, not errors."""
    event_type = request.args.get("event_type") or None
    marker = request.args.get("marker") or None
    return {"event_type": event_type if event_type in registry.WORKFLOW_EVENT_TYPES else None,
            "marker": marker if registry.markers_matching(marker) else None}


def form_choices() -> dict:
    return {"kinds": registry.EXPERIMENT_KINDS, "priorities": registry.PRIORITIES,
            "compute_sizes": registry.COMPUTE_SIZES, "projects": projects.choices()}


@dataclass
class ExperimentPage:
    experiment: Experiment
    errors: dict[str, PageError] = field(default_factory=dict)
    drafts: dict = field(default_factory=dict)
    timeline_before: str | None = None

    @classmethod
    def for_request(cls, experiment: Experiment, **kwargs) -> "ExperimentPage":
        """The page for a GET: with what the last refused post stashed for it, once."""
        stashed = _actions.take_stash(_stash_name(experiment.number))
        errors = {key: PageError(**value) for key, value in (stashed.get("errors") or {}).items()}
        drafts = stashed.get("drafts") or {}
        # A board move the menu did not offer links here with the status the owner chose,
        # so the override opens holding it (a refused move keeps its target).
        override_to = request.args.get("override_to")
        if override_to in registry.STATUS_BY_NAME and override_to != experiment.status:
            drafts.setdefault("override_to", override_to)
        return cls(experiment, errors=errors, drafts=drafts, **kwargs)

    def context(self) -> dict:
        experiment = self.experiment
        filters = timeline_filters()
        timeline = events.timeline(experiment, before=self.timeline_before,
                                   limit=current_app.config["TIMELINE_PAGE_SIZE"], **filters)
        parent = experiments.get_experiment(experiment.parent_experiment_id) \
            if experiment.parent_experiment_id else None
        drafts = {name: None for name in DRAFT_NAMES} | self.drafts
        if drafts.pop("show_preview", False):
            # The no-JavaScript preview: the editor's text came back through the stash.
            key, _body, drafts["preview_report"] = results.store_draft(experiment, drafts["draft_html"],
                                                                       drafts["draft_title"])
            drafts["preview_url"] = url_for("results.draft", number=experiment.number, key=key)
        version = experiments.page_version(experiment.number)
        plans = approvals.plan_overview(experiment)
        open_questions = questions.open_questions(experiment)
        return {
            "experiment": experiment, "page_version": version.version, "page_steady": version.steady,
            "keep_polling": not version.terminal,
            "poll_seconds": current_app.config["POLL_EXPERIMENT_SECONDS"],
            "errors": self.errors, "preview_error": self.errors.get("preview"), **drafts,
            "stepper": stages.stepper(experiment.status, experiment.status_before_block,
                                      events.entered_status_at(experiment),
                                      agents_on=bool(current_app.config.get("ANTHROPIC_API_KEY"))),
            "owner_action": stages.owner_action(
                experiment.status, experiment.status_before_block, pending_approval=plans.pending,
                plan_version=plans.current.version if plans.current else None, open_questions=len(open_questions),
                is_blocker=bool(plans.current and (plans.current.plan_json or {}).get("is_blocker"))),
            "original_question": results.original_question(experiment),
            "timeline": timeline, "parent": parent, "filters": filters,
            "moves": lifecycle.allowed_moves(experiment, "owner"),
            "event_types": registry.WORKFLOW_EVENT_TYPES, "marker_groups": registry.MARKER_GROUPS,
            "review_loops": markers.review_loops_for(experiment), "plans": plans,
            "plan_template": plan_template(),
            "open_questions": open_questions,
            "answered_questions": questions.answered_questions(experiment),
            **experiment_panels.context_for(experiment), **form_choices(),
            "metrics_data_url": url_for("metrics.chart_data", number=experiment.number),
            "metrics_refresh": None if experiment.terminal else current_app.config["POLL_EXPERIMENT_SECONDS"],
        }


def refuse(experiment: Experiment, key: str, error: SaganError | str, **drafts):
    """A full-page form was refused: stash the sentence and the owner's text, and redirect
    to the page at the form's section (post/redirect/get; a reload is a harmless GET)."""
    message = error if isinstance(error, str) else error.message
    field_name = None if isinstance(error, str) else getattr(error, "field", None)
    _actions.stash_for(_stash_name(experiment.number),
                       {"errors": {key: PageError(message, field_name).as_dict()}, "drafts": drafts})
    return back(experiment.number, FORM_SECTIONS[key])


def page_form(number: int, key: str, action, *, anchor: str | None = None, **drafts):
    """A full-page form of the experiment page, through `perform`: a refusal comes back
    beside the form `key` with what the owner typed (`drafts`), success goes back to the
    page at `anchor`."""
    return _actions.perform(action, done=lambda: back(number, anchor),
                            refused=lambda exc: refuse(experiments.get_experiment(number), key, exc, **drafts))


def back(number: int, anchor: str | None = None):
    """The 303 to the experiment page (at `anchor`) every successful full-page form answers."""
    return redirect(url_for("experiments.detail", number=number) + (f"#{anchor}" if anchor else ""), code=303)
