"""The demo's todos (SPEC §12.2): the owner's list in several states, most in the demo
project, one already an experiment (linked as that experiment's origin) and one that names
the belief it would test. Idempotent: a second load finds them and adds nothing."""
from __future__ import annotations

import sqlalchemy as sa

from models import Experiment, db
from models.day import Todo
from models.research import Belief
from services.core.actors import Actor
from services.day import todos
from services.pipeline import demo_research
from services.research import links

DEMO_OWNER = Actor("owner", None, "demo")
# (title, fields); `project` is the demo project's slug.
TODOS = [
    ("Read the μP paper before the next learning-rate sweep", {"intent": "exploratory"}),
    ("Ask whether 350M is big enough for the curriculum claim",
     {"intent": "hypothesis", "body_md": "If the curriculum effect only shows up past 1B, our null result says "
                                         "little. Ask at Thursday's meeting.", "project": True}),
    ("Repeat the curriculum sweep at 350M",
     {"status": "scoped", "intent": "replication", "priority": "high", "project": True,
      "body_md": "Same three orderings, three seeds each. The belief's next test."}),
    ("Pin the tokenizer version in the pod image",
     {"status": "open", "intent": "engineering", "assignee_kind": "agent", "priority": "normal"}),
    ("Measure bf16 drift past 100k steps",
     {"status": "blocked", "intent": "measurement", "project": True,
      "body_md": "Needs a 100k-step budget approved first."}),
    ("Write up the warmup result for the group meeting", {"status": "done", "project": True}),
]
# The demo todo that already became an experiment, and that experiment's title start.
BECAME = ("Find out what causes the loss spike at step 4k", "Is the warmup length")
TESTS_BELIEF = ("Repeat the curriculum sweep at 350M", "Curriculum ordering hardly matters at 125M")


def load_todos() -> bool:
    """Create the demo todos and their links; False when they are already there."""
    if db.session.scalar(sa.select(Todo.id).where(Todo.title == BECAME[0])) is not None:
        return False
    project = demo_research.research_project()
    made = {}
    for title, fields in TODOS:
        data = {"title": title, **fields}
        data["project"] = project.slug if fields.get("project") and project else None
        made[title] = todos.create_todo(data, DEMO_OWNER)
    experiment = db.session.scalar(sa.select(Experiment).where(Experiment.title.startswith(BECAME[1]))
                                   .order_by(Experiment.number).limit(1))
    origin = todos.create_todo({"title": BECAME[0], "intent": "hypothesis", "priority": "high",
                                "project": project.slug if project else None}, DEMO_OWNER)
    if experiment is not None:
        # Recorded as "make it an experiment" leaves it, for an experiment the demo already walked.
        origin.experiment_id, origin.status = experiment.id, "planning"
        links.create_link(links.describe("experiment", experiment), "derives_from", links.describe("todo", origin),
                          DEMO_OWNER, note="Made from this todo.")
    belief = db.session.scalar(sa.select(Belief).where(Belief.title == TESTS_BELIEF[1]))
    if belief is not None:
        links.create_link(links.describe("todo", made[TESTS_BELIEF[0]]), "tests", links.describe("belief", belief),
                          DEMO_OWNER, note="Its next test.")
    db.session.commit()
    return True
