"""The README and the pages of docs/: every Python example is labelled (its first line a comment naming it) and run
by the suite, as written; the README stays short (what a newcomer reads in five minutes) and its links resolve."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import readme_blocks
from conftest import requires

TESTS = Path(__file__).resolve().parent
# the labels that other test modules run (next to the tests of what they show)
RUN_ELSEWHERE = set(re.findall(r'readme_blocks\.run\("([^"]+)"\)',
                               "\n".join(p.read_text(encoding="utf-8") for p in TESTS.glob("test_*.py")
                                         if p.name != "test_docs.py")))
# the examples run here, and the frameworks each needs
HERE = {"In your own model": ("torch",), "Functions": (), "Using the interface": ("torch",), "Settings": ()}


def test_every_python_example_is_labelled_and_run_by_a_test():
    labels = []
    for code in readme_blocks.blocks():
        first = code.splitlines()[0].strip()
        assert first.startswith("# "), f"an example without a label (its first line): {first!r}"
        labels.append(first[2:])
    assert len(labels) == len(set(labels)), "two examples share a label"
    assert set(labels) == RUN_ELSEWHERE | set(HERE), (sorted(set(labels) - RUN_ELSEWHERE - set(HERE)),
                                                      sorted(RUN_ELSEWHERE | set(HERE) - set(labels)))


@pytest.mark.parametrize("label", [pytest.param(k, marks=[pytest.mark.slow, pytest.mark.compile])
                                   if k == "Using the interface" else k for k in HERE])
def test_the_example_runs_as_written(label):
    for module in HERE[label]:
        requires(module)
    readme_blocks.run(label)


def test_the_readme_is_short_and_its_links_resolve():
    readme = readme_blocks.README.read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 250
    for page in readme_blocks.PAGES:
        for target in re.findall(r"\]\(([^)#:]+)\)", page.read_text(encoding="utf-8")):
            assert (page.parent / target).exists(), f"{page.name} links to {target}, which does not exist"
