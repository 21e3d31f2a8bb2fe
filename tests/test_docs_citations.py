"""Every documentation page the package cites exists in the repository, with the cited section."""

import re
from pathlib import Path

import tflabench

REPOSITORY = Path(tflabench.__file__).resolve().parents[1]
CITATION = re.compile(r"docs/[\w/.-]+\.md(?:#[\w-]+)?")


def _anchor(heading: str) -> str:
    """The anchor mkdocs gives a heading (the Markdown toc extension's default slug)."""
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", heading).strip().lower())


def _anchors(page: Path) -> set[str]:
    return {_anchor(line.lstrip("#")) for line in page.read_text().splitlines() if re.match(r"#{1,6} ", line)}


def _citations() -> set[str]:
    files = [path for path in (REPOSITORY / "tflabench").rglob("*") if path.suffix in (".py", ".toml")]
    return {citation for path in files for citation in CITATION.findall(path.read_text())}


def test_the_anchor_follows_mkdocs():
    assert _anchor(" Fig. 13 LightningAttention-2") == "fig-13-lightningattention-2"
    assert _anchor("Reference TFLA kernels (mlstm_kernels)") == "reference-tfla-kernels-mlstm_kernels"


def test_cited_pages_and_sections_exist():
    citations = _citations()
    assert "docs/reference/mlstm-math.md#optimal-chunk-size" in citations
    missing = []
    for citation in sorted(citations):
        page, _, anchor = citation.partition("#")
        path = REPOSITORY / page
        if not path.is_file() or (anchor and anchor not in _anchors(path)):
            missing.append(citation)
    assert missing == []
