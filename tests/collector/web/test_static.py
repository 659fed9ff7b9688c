"""The web view's page ships whole in the package: nothing fetched from elsewhere, nothing to build."""

from __future__ import annotations

import re
from importlib import resources

import pytest

STATIC = resources.files("gz_ia.collector.web").joinpath("static")


@pytest.mark.parametrize("name", ["index.html", "app.js", "app.css", "icon.svg"])
def test_static_files_load_nothing_from_another_origin(name: str) -> None:
    """No http(s) URL, no protocol-relative URL, no inline script or style in the page's files."""
    text = STATIC.joinpath(name).read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", text), name
    assert "@import" not in text and "url(http" not in text
    if name == "index.html":
        assert re.findall(r"<script[^>]*>", text) == ['<script src="app.js">']  # the CSP allows no inline script
        assert "style=" not in text
