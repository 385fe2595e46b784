"""The README is a front door: short, with a table of contents, and every
link in it and in ``docs/`` leads somewhere: a file that exists, a heading that is there."""

from __future__ import annotations

import glob
import os
import re

import pytest

from conftest import ROOT

pytestmark = pytest.mark.unit

LINK = re.compile(r"\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but hyphens dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: str) -> set[str]:
    fenced, out = False, set()
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            out.add(_slug(line.lstrip("#")))
    return out


def _pages() -> list[str]:
    return [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]


def test_every_link_of_the_readme_and_the_docs_leads_somewhere():
    broken = []
    for page in _pages():
        text = open(page, encoding="utf-8").read()
        for target in LINK.findall(text):
            if target.startswith(("http://", "https://", "mailto:")):
                continue
            where, _, anchor = target.partition("#")
            path = os.path.normpath(os.path.join(os.path.dirname(page), where)) if where else page
            if not os.path.exists(path):
                broken.append(f"{os.path.relpath(page, ROOT)}: {target} (no such file)")
            elif anchor and path.endswith(".md") and anchor not in _anchors(path):
                broken.append(f"{os.path.relpath(page, ROOT)}: {target} (no such heading)")
    assert not broken, broken


def test_the_readme_is_short_and_links_every_page_of_the_docs():
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    assert len(readme.splitlines()) <= 400
    head = readme.split("## Contents")[0]
    assert "pip install -e \".[test]\" && python -m pytest" in head  # the two commands come first
    assert "python -m sweeper experiments/digits_mlp.py" in head
    for page in glob.glob(os.path.join(ROOT, "docs", "*.md")):
        name = os.path.basename(page)
        if name != "README.md":
            assert f"docs/{name}" in readme, name


def test_a_heading_slug_is_githubs():
    assert _slug(" Packing by measured memory (`--per-gpu auto`)") == "packing-by-measured-memory---per-gpu-auto"
    assert _slug("Many machines (Ray)") == "many-machines-ray"
