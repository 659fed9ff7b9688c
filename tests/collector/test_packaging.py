"""Both distributions carry complete metadata: licence file, classifiers, URLs, a real long description.

CI (``.ci/run``) also builds both with ``uv build`` and checks the results with ``twine check --strict``.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = ["client", "collector"]


def _project(member: str) -> dict[str, object]:
    project: dict[str, object] = tomllib.loads((REPO / member / "pyproject.toml").read_text())["project"]
    return project


@pytest.mark.parametrize("member", DISTRIBUTIONS)
def test_licence_file_matches_the_declared_licence(member: str) -> None:
    """Each distribution declares MIT and ships the repository's MIT LICENSE (an identical copy)."""
    project = _project(member)
    assert project["license"] == "MIT"
    assert project["license-files"] == ["LICENSE"]
    text = (REPO / member / "LICENSE").read_text()
    assert text == (REPO / "LICENSE").read_text()
    assert text.startswith("MIT License\n")
    assert "Permission is hereby granted, free of charge" in text


@pytest.mark.parametrize("member", DISTRIBUTIONS)
def test_metadata_has_classifiers_urls_and_python(member: str) -> None:
    """Classifiers (Python 3.11, Linux, typed; no licence classifier beside the SPDX expression),
    project URLs and requires-python."""
    project = _project(member)
    assert project["requires-python"] == ">=3.11"
    classifiers = project["classifiers"]
    assert isinstance(classifiers, list)
    for expected in ("Programming Language :: Python :: 3.11", "Operating System :: POSIX :: Linux", "Typing :: Typed"):
        assert expected in classifiers
    assert not [c for c in classifiers if c.startswith("License ::")]
    urls = project["urls"]
    assert isinstance(urls, dict)
    assert {"Homepage", "Source", "Documentation", "Issues"} <= set(urls)
    assert urls == _project("client")["urls"], "both distributions point at the same project"


@pytest.mark.parametrize("member", DISTRIBUTIONS)
def test_long_description_is_real_markdown(member: str) -> None:
    """The README each distribution publishes is Markdown with real line breaks: no literal ``\\n``."""
    project = _project(member)
    readme = (REPO / member / str(project["readme"])).read_text()
    assert "\\n" not in readme
    assert readme.startswith(f"# {project['name']}\n\n")
    assert len(readme.splitlines()) > 5
