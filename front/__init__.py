"""What a request meets before Flask's own machinery, in one place.

`gate` bounds slow bodies and idle connections (what the web server cannot); `quiet_polls`
answers an unchanged poll and `lean_ingest` a pod's ordinary progress post, each in one query,
because through Flask those hot paths cost several times more. All three read raw headers
through `headers`, the one parser, and put `security_headers` on what they answer. They are
plain WSGI layers installed by `create_app` (app.py); each module says why it exists.

May import: services, models, and from blueprints only the access rule's own helpers (a
layer must decide exactly as the view it stands in for would). Nothing here imports app.py.
"""
