"""docs/commands.md is generated from the command-line app and must match it (`make docs-cli` rewrites it)."""

from pathlib import Path

import tflabench
from tflabench.cli_reference import render

PAGE = Path(tflabench.__file__).resolve().parents[1] / "docs" / "commands.md"


def test_the_committed_command_reference_is_current():
    assert PAGE.read_text() == render(), "docs/commands.md is stale: run `make docs-cli`"


def test_every_command_has_a_section():
    page = render()
    for command in ("sweep", "plot", "report", "optimal-chunk", "roofline", "demo"):
        assert f"## `{command}`" in page
