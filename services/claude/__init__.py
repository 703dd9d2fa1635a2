"""The model: the Messages API client (retries, refusals, thinking blocks kept unchanged,
cost), the catalogue of models, efforts and prices, and the agent definitions read from
agents/*.md. Nothing here knows what an experiment is.

May import: core, code."""
