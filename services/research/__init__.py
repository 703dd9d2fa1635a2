"""The research record around the experiments (SPEC §11): projects and their narratives,
beliefs with their versions and the updates agents propose to them, typed links between any
two records, and the literature library with its feeds, imports and search.

May import: core, code, claude, workflow, dispatch, results."""
