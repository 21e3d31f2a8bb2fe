"""`run_cli`: the `tflabench` CLI run in-process with its output captured (shared by the CLI tests)."""

import io
from contextlib import redirect_stderr, redirect_stdout

from tflabench.cli import main


def run_cli(args: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr) of ``tflabench ARGS``."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(args)
            code = 0
        except SystemExit as exc:
            code = exc.code
    return code, out.getvalue(), err.getvalue()
