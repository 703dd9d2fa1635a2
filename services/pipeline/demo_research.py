"""The demo's research record around its experiments (SPEC §11): one project with its
question, beliefs in several states with the demo experiments as their evidence, typed links,
and a published narrative with a newer draft. Idempotent, like the curated experiments: a
second load finds the project and adds nothing."""
from __future__ import annotations

import sqlalchemy as sa

from models import Experiment, db
from models.research import Belief, Project
from services.core.actors import Actor
from services.research import beliefs, links, narratives, projects

DEMO_OWNER = Actor("owner", None, "demo")
PROJECT_SLUG = "training-dynamics"
PROJECT = {
    "slug": PROJECT_SLUG,
    "title": "Training dynamics of small models",
    "question": "Which of the instabilities we see when training 125M–350M models come from the schedule, "
                "and which from the data or the numerics — and which of them change what the model learns?",
    "summary_md": "Short, cheap runs on the lab's small models, each asking one question about a training "
                  "instability. Results feed the beliefs below; the narrative is what we would tell a mentor.",
}

# (title, first version, later change or None, the experiments' title starts that are its evidence).
# A later change is the owner's edit after an experiment, so the timeline shows evidence arriving.
BELIEFS = [
    ("Warmup length drives the step-4k loss spike",
     {"status": "active", "confidence": "LOW",
      "current_belief": "The spike at step 4k is the learning rate reaching its peak too early.",
      "next_test": "Double the warmup and look for the spike."},
     {"status": "supported", "confidence": "MODERATE",
      "current_belief": "A warmup of 2k steps or more removes the step-4k spike; 500 steps does not.",
      "evidence": "Two warmup lengths, three seeds each: no spike with the longer warmup.",
      "reasoning": "The spike vanished in every seed with the longer warmup."},
     ("Longer warmup removes", "Is the warmup length")),
    ("Weight decay sets the grokking delay",
     {"status": "active", "confidence": "LOW",
      "current_belief": "Stronger weight decay shortens the delay before the model generalizes."},
     {"status": "falsified", "confidence": "HIGH",
      "current_belief": "Weight decay does not explain the grokking delay: the delay is flat across a 30× range.",
      "evidence": "The delay stayed within 5% from 1e-3 to 3e-2.",
      "counterevidence": "Only one model size was tried.",
      "reasoning": "A flat delay across the whole range leaves no room for the claim."},
     ("Weight decay does not explain",)),
    ("Curriculum ordering hardly matters at 125M",
     {"status": "active", "confidence": "MODERATE",
      "current_belief": "Ordering the data easy-to-hard changes the final loss by less than 1%.",
      "evidence": "The first sweep: 0.6% difference, inside the seed spread.",
      "next_test": "Repeat at 350M before promoting the result."},
     None, ("Curriculum ordering",)),
    ("Mixed precision drifts after long runs",
     {"status": "active", "confidence": "LOW",
      "current_belief": "bf16 accumulation drifts from fp32 after about 50k steps."},
     {"status": "weakened", "confidence": "LOW",
      "current_belief": "Any bf16 drift is below the seed spread up to 100k steps.",
      "counterevidence": "The drift measured so far is smaller than the difference between two seeds.",
      "reasoning": "The interpreting run shows no drift beyond the noise."},
     ("Mixed precision drift",)),
    ("Attention sinks survive fine-tuning at 8k context",
     {"status": "draft", "confidence": "LOW",
      "current_belief": "The first token keeps its attention mass after fine-tuning at 8k.",
      "next_test": "Answer the clarifying questions, then plan a probe of the attention mass."},
     None, ("Do attention sinks",)),
    ("Label smoothing helps the 2-layer probe",
     {"status": "draft", "confidence": "LOW",
      "current_belief": "Smoothing of 0.1 raises the probe's accuracy by a point or two.",
      "next_test": "A two-arm run on CIFAR-10 with three seeds."},
     None, ("Does label smoothing",)),
]

NARRATIVE_V1 = """## Where we are

The step-4k spike was the schedule: a longer warmup removes it (#{warmup}). Weight decay,
the usual suspect for the grokking delay, is ruled out across a 30× range (#{grokking}).

## What is open

Whether curriculum ordering matters at all (#{curriculum} says barely, at 125M), and whether
bf16 drifts over long runs — so far any drift hides in the seed spread.
"""
NARRATIVE_V2 = NARRATIVE_V1 + """
## Next

Repeat the curriculum sweep at 350M, then write up the warmup result for the group.
"""


def _experiments_starting(prefixes: tuple[str, ...]) -> list[Experiment]:
    return list(db.session.scalars(sa.select(Experiment).where(
        sa.or_(*(Experiment.title.startswith(prefix) for prefix in prefixes))).order_by(Experiment.number)))


def load_research_record() -> bool:
    """Create the demo project, its beliefs, links and narrative; False when already there."""
    if projects.find(PROJECT_SLUG) is not None:
        return False
    project = projects.create_project(PROJECT, DEMO_OWNER)
    db.session.flush()
    demo_experiments = list(db.session.scalars(sa.select(Experiment).where(Experiment.tags.is_not(None))))
    for experiment in demo_experiments:
        if "demo" in (experiment.tags or []) and experiment.status != "archived":
            experiment.project_id = project.id
    cited: dict[str, int] = {}
    for title, first, later, evidence_titles in BELIEFS:
        belief = beliefs.create_belief({**first, "title": title, "project": PROJECT_SLUG}, DEMO_OWNER)
        evidence = _experiments_starting(evidence_titles)
        for experiment in evidence:
            links.create_link(links.describe("experiment", experiment), "tests", links.describe("belief", belief),
                              DEMO_OWNER, "The demo experiment asks this.")
        if later is not None and evidence:
            beliefs.edit_belief(belief, {**later, "experiment": f"#{evidence[0].number}"}, DEMO_OWNER)
            kind = "contradicts" if later["status"] in ("falsified", "weakened") else "supports"
            links.create_link(links.describe("experiment", evidence[0]), kind, links.describe("belief", belief),
                              DEMO_OWNER, later["reasoning"])
        if evidence:
            cited[title.split()[0].lower()] = evidence[0].number
    journey_belief = db.session.scalar(sa.select(Belief).where(Belief.title == "The probe is stable across seeds"))
    if journey_belief is not None:
        journey_belief.project_id = project.id
    numbers = {"warmup": cited.get("warmup", 0), "grokking": cited.get("weight", 0),
               "curriculum": cited.get("curriculum", 0)}
    first = narratives.save_draft(project, NARRATIVE_V1.format(**numbers), DEMO_OWNER)
    narratives.publish(project, first.version, DEMO_OWNER)
    narratives.save_draft(project, NARRATIVE_V2.format(**numbers), DEMO_OWNER)
    db.session.commit()
    return True


def research_project() -> Project | None:
    return projects.find(PROJECT_SLUG)
