"""The README's configuration table stays complete as config.py grows."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def settings_read_by_config() -> set[str]:
    source = (ROOT / "config.py").read_text()
    names = re.findall(r'(?:environ\.get|_env_\w+)\(\s*"([A-Z][A-Z0-9_]*)"', source)
    names += re.findall(r'environ\[\s*"([A-Z][A-Z0-9_]*)"\s*\]', source)
    return set(names)


def test_readme_documents_every_environment_variable_config_reads():
    """Does README.md name (in backticks) every environment variable that config.py reads?"""
    names = settings_read_by_config()
    assert "DATABASE_URL" in names and "SAGAN_SCHEDULER_TICK_SECONDS" in names  # the scan works
    readme = (ROOT / "README.md").read_text()
    missing = sorted(name for name in names if f"`{name}`" not in readme)
    assert not missing, f"README.md's configuration table lacks: {', '.join(missing)}"
