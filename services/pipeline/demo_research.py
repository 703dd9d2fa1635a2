"""The demo's research record around its experiments (SPEC §11): one project with its
question, beliefs in several states with the demo experiments as their evidence, typed links,
a library of papers the project rests on, and a published narrative with a newer draft. Idempotent, like the curated experiments: a
second load finds the project and adds nothing."""
from __future__ import annotations

import sqlalchemy as sa

from models import Experiment, db
from models.research import Belief, Project
from services.core.actors import Actor
from services.research import beliefs, links, literature, narratives, projects

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

# One line per paragraph: the renderer keeps line breaks (nl2br), so a hard-wrapped
# paragraph would break mid-sentence on a phone.
NARRATIVE_V1 = ("## Where we are\n\n"
                "The step-4k spike was the schedule: a longer warmup removes it (#{warmup}). Weight decay, "
                "the usual suspect for the grokking delay, is ruled out across a 30× range (#{grokking}).\n\n"
                "## What is open\n\n"
                "Whether curriculum ordering matters at all (#{curriculum} says barely, at 125M), and whether "
                "bf16 drifts over long runs — so far any drift hides in the seed spread.\n")
NARRATIVE_V2 = NARRATIVE_V1 + """
## Next

Repeat the curriculum sweep at 350M, then write up the warmup result for the group.
"""


# The project's library: (title, authors, year, arXiv id, read state, what the owner noted).
PAPERS = [
    ("Attention Is All You Need", ["Ashish Vaswani", "Noam Shazeer"], 2017, "1706.03762", "read", ""),
    ("Grokking: Generalization Beyond Overfitting on Small Algorithmic Datasets", ["Alethea Power", "Yuri Burda"],
     2022, "2201.02177", "read", "The delay we study; their weight decay result is what our falsified belief tested."),
    ("Omnigrok: Grokking Beyond Algorithmic Data", ["Ziming Liu", "Eric J. Michaud", "Max Tegmark"], 2022,
     "2210.01117", "reading", "Ties grokking to the weight norm at initialisation, not to weight decay alone."),
    ("Progress measures for grokking via mechanistic interpretability", ["Neel Nanda", "Lawrence Chan"], 2023,
     "2301.05217", "queued", ""),
    ("On the Variance of the Adaptive Learning Rate and Beyond", ["Liyuan Liu", "Haoming Jiang"], 2019,
     "1908.03265", "read", "Why warmup helps Adam: the early variance of the adaptive rate."),
    ("Decoupled Weight Decay Regularization", ["Ilya Loshchilov", "Frank Hutter"], 2017, "1711.05101", "read", ""),
    ("Efficient Streaming Language Models with Attention Sinks", ["Guangxuan Xiao", "Yuandong Tian"], 2023,
     "2309.17453", "reading", "Names the attention-sink effect our draft belief is about."),
    ("When Does Label Smoothing Help?", ["Rafael Müller", "Simon Kornblith", "Geoffrey Hinton"], 2019,
     "1906.02629", "queued", ""),
    ("Rethinking the Inception Architecture for Computer Vision", ["Christian Szegedy", "Vincent Vanhoucke"], 2015,
     "1512.00567", "archived", ""),
    ("Mixed Precision Training", ["Paulius Micikevicius", "Sharan Narang"], 2017, "1710.03740", "read",
     "Loss scaling; the baseline our bf16 drift runs compare against."),
    ("Scaling Laws for Neural Language Models", ["Jared Kaplan", "Sam McCandlish"], 2020, "2001.08361", "read", ""),
    ("Training Compute-Optimal Large Language Models", ["Jordan Hoffmann", "Sebastian Borgeaud"], 2022,
     "2203.15556", "read", ""),
    ("Adam: A Method for Stochastic Optimization", ["Diederik P. Kingma", "Jimmy Ba"], 2014, "1412.6980", "read", ""),
    ("Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour", ["Priya Goyal", "Piotr Dollár"], 2017,
     "1706.02677", "read", "The gradual warmup recipe."),
    ("An Empirical Model of Large-Batch Training", ["Sam McCandlish", "Jared Kaplan"], 2018, "1812.06162", "read",
     "The gradient noise scale our batch-size experiment measures."),
    ("Deep Double Descent: Where Bigger Models and More Data Hurt", ["Preetum Nakkiran", "Gal Kaplun"], 2019,
     "1912.02292", "unread", ""),
    ("Small-scale proxies for large-scale Transformer training instabilities", ["Mitchell Wortsman", "Peter J. Liu"],
     2023, "2309.14322", "unread", "Loss spikes reproduced at small scale: directly on our question."),
    ("Stabilizing Transformer Training by Preventing Attention Entropy Collapse", ["Shuangfei Zhai", "Tatiana Likhomanenko"],
     2023, "2303.06296", "unread", ""),
    ("Gradient Descent on Neural Networks Typically Occurs at the Edge of Stability", ["Jeremy M. Cohen", "Simran Kaur"],
     2021, "2103.00065", "queued", ""),
    ("Adaptive Gradient Methods at the Edge of Stability", ["Jeremy M. Cohen", "Behrooz Ghorbani"], 2022,
     "2207.14484", "unread", ""),
    ("Pythia: A Suite for Analyzing Large Language Models Across Training and Scaling",
     ["Stella Biderman", "Hailey Schoelkopf"], 2023, "2304.01373", "unread", ""),
    ("Toy Models of Superposition", ["Nelson Elhage", "Tristan Hume"], 2022, "2209.10652", "unread", ""),
    ("On Layer Normalization in the Transformer Architecture", ["Ruibin Xiong", "Yunchang Yang"], 2020,
     "2002.04745", "read", "Pre-LN needs no warmup: a threat to the warmup belief's mechanism."),
    ("Tensor Programs V: Tuning Large Neural Networks via Zero-Shot Hyperparameter Transfer",
     ["Greg Yang", "Edward J. Hu"], 2022, "2203.03466", "unread", ""),
    ("Bag of Tricks for Image Classification with Convolutional Neural Networks", ["Tong He", "Zhi Zhang"], 2018,
     "1812.01187", "archived", ""),
    ("SGDR: Stochastic Gradient Descent with Warm Restarts", ["Ilya Loshchilov", "Frank Hutter"], 2016,
     "1608.03983", "unread", ""),
    ("Language Models are Few-Shot Learners", ["Tom B. Brown", "Benjamin Mann"], 2020, "2005.14165", "archived", ""),
    ("Sparse Autoencoders Find Highly Interpretable Features in Language Models", ["Hoagy Cunningham", "Aidan Ewart"],
     2023, "2309.08600", "queued", ""),
]


def _load_library(project: Project) -> None:
    for title, authors, year, arxiv_id, read_state, notes in PAPERS:
        literature.add({"title": title, "authors": authors, "year": year, "arxiv_id": arxiv_id,
                        "url": f"https://arxiv.org/abs/{arxiv_id}", "read_state": read_state, "notes": notes,
                        "project_id": str(project.id)}, source="arxiv")


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
    _load_library(project)
    first = narratives.save_draft(project, NARRATIVE_V1.format(**numbers), DEMO_OWNER)
    narratives.publish(project, first.version, DEMO_OWNER)
    narratives.save_draft(project, NARRATIVE_V2.format(**numbers), DEMO_OWNER)
    db.session.commit()
    return True


def research_project() -> Project | None:
    return projects.find(PROJECT_SLUG)
