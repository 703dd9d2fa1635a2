"""A generated literature library for the research-record benches (not a bench itself): titles,
authors and abstracts built from a seeded vocabulary, so every run inserts the same library.

Words are drawn Zipf-like (a few very common, a long tail), the way words spread over real
abstracts; one word of the tail, RARE_WORD, is planted in about one item in a thousand so
a rare query has a known, small answer set.
"""
from __future__ import annotations

import random
import uuid
from datetime import timedelta

from services.core.clock import utcnow
from services.research.literature_sources import match_key

FIRST = ("Ada", "Alan", "Barbara", "Chen", "Daniel", "Elena", "Fatima", "Grace", "Hiro", "Ilya", "Jun", "Kai",
         "Leila", "Maria", "Noam", "Oriol", "Priya", "Quoc", "Rosa", "Samy", "Tomas", "Uma", "Yann", "Zhe")
LAST = ("Bengio", "Chen", "Dean", "Finn", "Goodfellow", "Hinton", "Irving", "Jordan", "Karpathy", "LeCun", "Li",
        "Manning", "Ng", "Olah", "Pearl", "Quinn", "Russell", "Sutskever", "Tegmark", "Vaswani", "Wang", "Xu",
        "Yang", "Zhang", "Kingma", "Lample", "Shazeer", "Amodei", "Christiano", "Leike", "Steinhardt")
# Ordered roughly by how often they appear in machine-learning abstracts: the sampler favours the first.
TERMS = ("model", "training", "language", "learning", "data", "network", "performance", "method", "attention",
         "transformer", "representation", "task", "generalization", "optimization", "benchmark", "evaluation",
         "gradient", "loss", "scaling", "inference", "probe", "feature", "layer", "token", "embedding",
         "reinforcement", "policy", "reward", "alignment", "interpretability", "circuit", "neuron", "activation",
         "sparse", "autoencoder", "dictionary", "superposition", "distillation", "pruning", "quantization",
         "robustness", "adversarial", "calibration", "uncertainty", "bayesian", "variational", "diffusion",
         "contrastive", "retrieval", "memory", "reasoning", "chain", "prompt", "instruction", "finetuning",
         "pretraining", "corpus", "tokenizer", "vocabulary", "curriculum", "regularization", "dropout",
         "normalization", "residual", "convolution", "recurrent", "graph", "kernel", "spectral", "manifold",
         "geometry", "topology", "causal", "intervention", "counterfactual", "ablation", "steering", "vector",
         "subspace", "linear", "nonlinear", "emergent", "phase", "transition", "lottery", "ticket", "mixture",
         "experts", "routing", "compression", "entropy", "information", "bottleneck", "hessian", "curvature",
         "sharpness", "momentum", "adam", "schedule", "warmup", "batch", "width", "depth", "initialization",
         "symmetry", "equivariance", "invariance", "augmentation", "synthetic", "hallucination", "factuality",
         "toxicity", "deception", "honesty", "oversight", "debate", "amplification", "specification", "gaming",
         "goal", "misgeneralization", "shutdown", "corrigibility", "agents", "planning", "search", "tree",
         "monte", "carlo", "simulation", "world", "dynamics", "control", "robotics", "vision", "speech", "audio",
         "multimodal", "clip", "caption", "segmentation", "detection", "tracking", "video", "protein", "molecule")
RARE_WORD = "grokking"
TITLE_SHAPES = ("{A} {B} for {C} {D}", "On the {A} of {B} in {C} models", "{A} {B}: {C} and {D} at scale",
                "Towards {A} {B} with {C}", "When does {A} {B} help {C}?", "{A} without {B}: a {C} study",
                "Understanding {A} through {B} {C}", "Scaling {A} {B} to {C} {D}")
SENTENCES = ("We study {a} {b} in {c} {d}.", "Our {a} improves {b} on {c} benchmarks by a wide margin.",
             "We show that {a} and {b} interact through the {c} of the {d}.",
             "Prior work on {a} assumes {b}; we relax this with a {c} {d}.",
             "Experiments across {a}, {b} and {c} settings confirm the {d} hypothesis.",
             "We release code, {a} checkpoints and a {b} {c} for future {d} research.",
             "A simple {a} baseline matches more complex {b} methods on {c}.",
             "The {a} emerges early in {b} and predicts {c} {d}.")


class Vocabulary:
    """Seeded draws: words Zipf-like from TERMS, names from FIRST × LAST."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.weights = [1 / (rank + 1) ** 1.1 for rank in range(len(TERMS))]

    def words(self, count: int) -> list[str]:
        return self.rng.choices(TERMS, weights=self.weights, k=count)

    def title(self) -> str:
        a, b, c, d = self.words(4)
        shape = self.rng.choice(TITLE_SHAPES)
        return shape.format(A=a.capitalize(), B=b, C=c, D=d)[:1000]

    def authors(self) -> list[str]:
        return [f"{self.rng.choice(FIRST)} {self.rng.choice(LAST)}" for _ in range(self.rng.randint(1, 6))]

    def abstract(self, rare: bool) -> str:
        sentences = []
        for _ in range(self.rng.randint(5, 9)):
            a, b, c, d = self.words(4)
            sentences.append(self.rng.choice(SENTENCES).format(a=a, b=b, c=c, d=d))
        if rare:
            sentences.insert(self.rng.randint(0, len(sentences)), f"We observe {RARE_WORD} late in training.")
        return " ".join(sentences)


def item_rows(count: int, *, seed: int, project_ids: list, start: int = 0,
              project_share: float = 0.6) -> list[dict]:
    """`count` literature_items rows (dicts for one bulk insert), spread over the projects
    given (and none), the read states, and the last three years. `start` offsets the
    identifiers so several calls make distinct works; `project_share` of them belong to a project."""
    vocabulary = Vocabulary(seed)
    rng = vocabulary.rng
    now = utcnow()
    states = ("unread", "unread", "unread", "queued", "reading", "read", "read", "archived")
    rows = []
    for n in range(start, start + count):
        title = f"{vocabulary.title()} ({n})"  # the number keeps every work distinct, as a library's are
        authors = vocabulary.authors()
        stamp = now - timedelta(minutes=rng.randint(0, 60 * 24 * 365 * 3))
        rows.append({
            "id": uuid.uuid4(), "type": "paper", "title": title, "authors": authors,
            "year": stamp.year, "venue": rng.choice(("NeurIPS", "ICML", "ICLR", "arXiv", "ACL", "")),
            "url": f"https://arxiv.org/abs/{2300 + n // 100000}.{n % 100000:05d}",
            "arxiv_id": f"{2300 + n // 100000}.{n % 100000:05d}", "doi": None, "openreview_id": None,
            "s2_id": None, "abstract": vocabulary.abstract(rng.random() < 0.001), "summary_md": "",
            "relevance_reason_md": "", "threat_reason_md": "", "read_state": rng.choice(states),
            "score": round(rng.random(), 3) if rng.random() < 0.5 else None,
            "tags": [rng.choice(("probes", "sae", "rl", "theory", "evals"))], "source": "arxiv", "notes": "",
            "match_key": match_key(title, authors),
            "project_id": rng.choice(project_ids) if project_ids and rng.random() < project_share else None,
            "feed_id": None, "created_at": stamp, "updated_at": stamp})
    return rows
