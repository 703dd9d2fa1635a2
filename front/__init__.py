"""The layers a request passes before Flask's own machinery.

Each is plain WSGI middleware installed by `create_app` (app.py). They exist because of
what the server in front of them cannot do, or because a hot path answered through Flask
would cost several times more; each module says which.
"""
