"""Links in agent and owner prose (services.core.sanitize.render_markdown): what was written as an
address becomes a link; a file name that happens to end in a country domain does not."""
from __future__ import annotations

import pytest

from services.core.sanitize import render_markdown


@pytest.mark.parametrize("name", ["probe.py", "train.sh", "README.md", "config.yml", "stats.ai"])
def test_file_names_stay_text(name):
    assert render_markdown(f"Run {name} first.") == f"<p>Run {name} first.</p>"


@pytest.mark.parametrize("written, href", [("https://example.com/a?b=1", "https://example.com/a?b=1"),
                                          ("http://arxiv.org/abs/1", "http://arxiv.org/abs/1"),
                                          ("www.python.org", "http://www.python.org")])
def test_written_addresses_become_links_that_leave_quietly(written, href):
    html = render_markdown(f"See {written} for details.")
    assert f'<a href="{href}" rel="noopener noreferrer nofollow">{written}</a>' in html
