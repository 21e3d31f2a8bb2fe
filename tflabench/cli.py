"""The `tflabench` command-line app (Typer).

Each area registers its own commands (one module per area), so this file only assembles them and
turns input errors into a one-line message with exit code 2.
"""

from __future__ import annotations

import json
import sys

import typer

from tflabench.errors import InputError

app = typer.Typer(
    name="tflabench",
    help="Benchmark and roofline-analyse linear-attention / linear-RNN kernels (TFLA mLSTM and peers).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _register_commands() -> None:
    from tflabench import demo
    from tflabench.analysis import commands as analysis_commands
    from tflabench.analysis import model_commands, plot_commands
    from tflabench.bench import commands as bench_commands
    from tflabench.bench import peer_commands

    for module in (analysis_commands, model_commands, bench_commands, peer_commands, plot_commands):
        module.register(app)
    demo.register(app, run_command=main)


@app.callback()
def _root() -> None:
    """Benchmark and roofline-analyse linear-attention / linear-RNN kernels (TFLA mLSTM and peers)."""


@app.command()
def version() -> None:
    """Print the tflabench version."""
    from tflabench import __version__

    typer.echo(__version__)


def _fail(message: str, exit_code: int = 2, as_json: bool = False) -> None:
    """One ``error:`` line on stderr and the exit code; with --json, also ``{"error": message}`` on stdout
    so that a script reading the JSON learns why there is none."""
    if as_json:
        typer.echo(json.dumps({"error": message}))
    typer.echo(f"error: {message}", err=True)
    sys.exit(exit_code)


def _is_click_exception(exc: BaseException) -> bool:
    # Typer >= 0.20 vendors click (typer._click), older Typer uses click itself: match by interface.
    return hasattr(exc, "format_message") and hasattr(exc, "exit_code")


def _os_error_message(exc: OSError) -> str:
    """A file-system error on a path the user named (full disk, a folder removed meanwhile, ...)."""
    where = f" {str(exc.filename)!r}" if exc.filename else ""
    return f"cannot access{where}: {exc.strerror or exc}"


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the app; bad input gives one line on stderr and exit code 2 (with
    --json, a JSON object with the error on stdout as well)."""
    from tflabench.bench.commands import with_bare_ray_address

    args = with_bare_ray_address(sys.argv[1:] if argv is None else list(argv))
    as_json = "--json" in args
    try:
        result = app(args=args, standalone_mode=False)
    except InputError as exc:
        _fail(str(exc), as_json=as_json)
    except OSError as exc:
        _fail(_os_error_message(exc), as_json=as_json)
    except Exception as exc:
        if type(exc).__name__ == "Abort":
            _fail("aborted", 130)
        if not _is_click_exception(exc):
            raise
        message = exc.format_message().strip().splitlines()
        _fail(message[0] if message else type(exc).__name__, exc.exit_code, as_json=as_json)
    if isinstance(result, int) and result != 0:
        sys.exit(result)


_register_commands()
