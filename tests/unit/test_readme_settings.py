"""The README's configuration table and the code agree both ways: every environment variable
config.py reads is documented, and every documented one is read and then used by the code."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ENV_READ = (r'(?:environ\.get|_env_\w+|getenv)\(\s*"([A-Z][A-Z0-9_]*)"', r'environ\[\s*"([A-Z][A-Z0-9_]*)"\s*\]')
# Where the project's own code lives (config.py itself is where settings are read, not used).
CODE = ["app.py", "cli.py", "serve.py", "Makefile", "blueprints", "front", "models", "scripts", "services", "templates", "workers"]

# Config keys that Flask or an extension reads for us, not our code.
READ_BY_LIBRARIES = {
    "SQLALCHEMY_DATABASE_URI": "Flask-SQLAlchemy",
    "SECRET_KEY": "Flask",
    "WTF_CSRF_TIME_LIMIT": "Flask-WTF",
    "MAX_CONTENT_LENGTH": "Flask",
}

def settings_read_by_config() -> set[str]:
    source = (ROOT / "config.py").read_text()
    return {name for pattern in ENV_READ for name in re.findall(pattern, source)}


def config_keys_by_setting() -> dict[str, str]:
    """Environment variable → the config key config.py stores it under (first one wins)."""
    keys, source = {}, (ROOT / "config.py").read_text()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            value = ast.get_source_segment(source, node.value) or ""
            for target in targets:
                if isinstance(target, ast.Name) and target.id.isupper():
                    for pattern in ENV_READ:
                        for name in re.findall(pattern, value):
                            keys.setdefault(name, target.id)
    return keys


def documented_settings() -> set[str]:
    """The names in the first column of the README's configuration table."""
    return set(re.findall(r"^\|\s*`([A-Z][A-Z0-9_]*)`", (ROOT / "README.md").read_text(), re.M))


def project_code() -> str:
    texts = []
    for entry in CODE:
        path = ROOT / entry
        files = [path] if path.is_file() else [p for p in path.rglob("*") if p.suffix in (".py", ".html", ".sh")]
        texts += [f.read_text(errors="replace") for f in files]
    return "\n".join(texts)


def test_readme_documents_every_environment_variable_config_reads():
    """Does README.md name (in backticks) every environment variable that config.py reads?"""
    names = settings_read_by_config()
    assert "DATABASE_URL" in names and "SAGAN_SCHEDULER_TICK_SECONDS" in names  # the scan works
    readme = (ROOT / "README.md").read_text()
    missing = sorted(name for name in names if f"`{name}`" not in readme)
    assert not missing, f"README.md's configuration table lacks: {', '.join(missing)}"


def test_every_documented_setting_is_read_and_used():
    """Is every setting in the README's table read by the code — and, when config.py reads it,
    is the config key it lands in used somewhere (or read by Flask or an extension)?"""
    documented = documented_settings()
    keys = config_keys_by_setting()
    assert {"SAGAN_SCHEDULER_TICK_SECONDS", "DATABASE_URL"} <= documented  # the scan works
    assert keys["SAGAN_SCHEDULER_TICK_SECONDS"] == "SCHEDULER_TICK_SECONDS"
    code = project_code()
    unused = []
    for name in sorted(documented):
        key = keys.get(name)
        if key is not None:
            if key not in READ_BY_LIBRARIES and not re.search(rf"\b{key}\b", code):
                unused.append(f"{name} (config key {key})")
        elif not re.search(rf"\b{name}\b", code):
            unused.append(name)
    assert not unused, f"documented but used nowhere: {', '.join(unused)}"

