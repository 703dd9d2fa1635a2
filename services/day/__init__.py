"""The owner's day (SPEC §12): todos, the daily log, and later the Today page, weekly reviews and ideation.

May import: core, code, claude, workflow, dispatch, results, research."""
