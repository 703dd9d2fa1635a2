"""The Flask extension objects, made here and bound to the app in `app.create_app`.

They live apart from the application factory so that a blueprint can import one (the access
layer calls `csrf.protect()`) without importing app.py, which imports every blueprint.
"""
from __future__ import annotations

from flask_login import LoginManager
from flask_migrate import Migrate
from flask_wtf.csrf import CSRFProtect
from htmx_flask import Htmx

login_manager = LoginManager()
csrf = CSRFProtect()
htmx = Htmx()
migrate = Migrate()
