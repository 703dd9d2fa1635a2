"""The domain layer: every workflow lives here (no flask.request, no templates)."""
