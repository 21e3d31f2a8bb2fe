"""Relative links of the README and the results index point at files of the repository (the docs pages are
checked by `mkdocs build --strict`), and the README stays a five-minute read."""

import re
from pathlib import Path

import pytest

import tflabench
from tflabench.analysis import run_data

REPOSITORY = Path(tflabench.__file__).resolve().parents[1]
LINK = re.compile(r"\]\(([^)\s#]+)(?:#[^)\s]*)?\)")


@pytest.mark.parametrize("page", ["README.md", "results/README.md"])
def test_relative_links_resolve(page):
    path = REPOSITORY / page
    targets = [target for target in LINK.findall(path.read_text()) if not re.match(r"[a-z]+:", target)]
    assert targets
    assert [target for target in targets if not (path.parent / target).exists()] == []


def test_the_readme_is_short():
    assert len((REPOSITORY / "README.md").read_text()) <= 12_000


def test_the_results_index_lists_every_run():
    index = (REPOSITORY / "results" / "README.md").read_text()
    results = REPOSITORY / "results"
    runs = run_data.committed_run_dirs(results)
    folders = [path for path in (results / "gpu-tests").iterdir() if path.is_dir()]
    missing = [path for path in [*runs, *folders] if path.relative_to(results).as_posix() + "/" not in index
               and path.parent.name != "tfla-vs-reference"]
    assert missing == []
