"""The docs: the API reference agrees with the model, and every link inside the repository resolves."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

from support.peers import ROOT

GUIDES = sorted((ROOT / "docs").glob("*.md"))
DOCS = [ROOT / "README.md", *GUIDES, ROOT / "CHANGELOG.md"]
LINK = re.compile(r"\]\(([^)\s]+)\)")
# Code blocks and spans are not Markdown: a pattern such as [a-z](...) there is no link.
CODE = re.compile(r"```.*?```|`[^`\n]*`", re.DOTALL)


def test_api_reference_is_fresh():
    proc = subprocess.run(
        [sys.executable, "hack/gen_api_docs.py", "--check"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr


def anchors(path: pathlib.Path) -> set[str]:
    """The anchors GitHub gives a Markdown file's headings: lower case, punctuation dropped, - for spaces."""
    headings = re.findall(r"^#+ (.+)$", path.read_text(), re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    broken = []
    for target in LINK.findall(CODE.sub("", doc.read_text())):
        if "://" in target:
            continue
        path, _, anchor = target.partition("#")
        file = (doc.parent / path) if path else doc
        if not file.exists() or (anchor and file.suffix == ".md" and anchor not in anchors(file)):
            broken.append(target)
    assert broken == []


def test_every_guide_is_linked_from_the_readme():
    readme = (ROOT / "README.md").read_text()
    assert [d.name for d in GUIDES if f"](docs/{d.name})" not in readme] == []
    assert "](CHANGELOG.md)" in readme


# A repository path the docs name in a code span, e.g. `examples/claims/quickstart.yaml`.
REPO_PATH = re.compile(r"`((?:apis|benchmarks|docs|examples|function|hack|package|tests|tools)/[^`\s]*)`")


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_named_files_exist(doc):
    assert [p for p in REPO_PATH.findall(doc.read_text()) if not list(ROOT.glob(p.rstrip("/")))] == []
