"""The owner's decisions on an experiment: plans (parsing, the template, redaction), questions
and their answers, approvals and the cost terms they fix, follow-ups, the discussion thread,
moves on the board, and the import of the old system's plans.

May import: core, code, claude, workflow, dispatch, results, research, day."""
