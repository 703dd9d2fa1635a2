"""The owner's day (SPEC §12): todos, the daily log, weekly reviews, and later the Today page and ideation.

May import: core, code, claude, workflow, dispatch, results, research."""
