"""Results: clean results and their figures, the lint and the numbers check on what the
analyzer wrote, the completion audit against the plan, and read-only share links.

May import: core, code, claude, workflow, dispatch."""
