"""The `tflabench` command-line app (Typer).

Each area registers its own commands (one module per area), so this file only assembles them and
turns input errors into a one-line message with exit code 2.
"""

from __future__ import annotations

import sys

import click
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
    from tflabench.analysis import commands as analysis_commands
    from tflabench.analysis import plot_commands
    from tflabench.bench import commands as bench_commands
    from tflabench import demo

    for module in (analysis_commands, bench_commands, plot_commands, demo):
        module.register(app)


@app.command()
def version() -> None:
    """Print the tflabench version."""
    from tflabench import __version__

    typer.echo(__version__)


_register_commands()


def _fail(message: str) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: run the app, exit 2 with one line on bad input."""
    try:
        result = app(args=argv, standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.UsageError as exc:
        _fail(exc.format_message().splitlines()[0] if exc.format_message() else str(exc))
    except click.ClickException as exc:
        click.echo(f"error: {exc.format_message()}", err=True)
        sys.exit(exc.exit_code)
    except InputError as exc:
        _fail(str(exc))
    if isinstance(result, int) and result != 0:
        sys.exit(result)
