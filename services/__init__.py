"""The domain layer: every workflow lives here (no flask.request, no templates).

The packages, lowest first. A module may import from its own package and from packages
earlier in LAYERS, never from a later one (tests/unit/test_layers.py); each package's
docstring says what lives there.

    core       the platform every other module leans on
    code       worktrees, the sandbox and the host accounts code runs as
    claude     the model: its API, its catalogue, the agent definitions
    workflow   experiments, statuses, markers, runs, jobs, starting agents
    dispatch   pods and what they cost, post, upload and recover from
    results    clean results, their lint, the completion audit, share links
    research   projects, beliefs and their evidence, typed links, the literature library
    day        the owner's day: todos, the daily log
    planning   plans, questions, approvals and the owner's other decisions
    agents     the agents' tools and their loop, which reach into every domain
    pipeline   what ties the stages together: the side effects of a move, sweeps, the demo
"""

LAYERS = ("core", "code", "claude", "workflow", "dispatch", "results", "research", "day", "planning", "agents", "pipeline")
