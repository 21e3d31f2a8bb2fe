"""The command reference page (docs/commands.md), generated from the Typer app.

The page is written from what the app itself declares (each command's docstring, its arguments and
options with their help, type and default), so it cannot drift from ``tflabench COMMAND --help``.
``make docs-cli`` rewrites it; ``tests/test_cli_reference.py`` fails while the committed page differs.

Usage: python -m tflabench.cli_reference [--output docs/commands.md]
"""

from __future__ import annotations

import argparse
import enum
import inspect
import re
import types
import typing
from pathlib import Path

import typer.main

from tflabench.cli import app

PAGE = Path("docs/commands.md")

HEADER = """# Command reference

Generated from the command-line app by `make docs-cli` (`python -m tflabench.cli_reference`); a test
fails when this page and the app disagree. Every command also prints its help with `--help`. Bad input
(an unknown GPU, a non-positive dimension, an unknown kernel family, ...) prints one `error: ...` line
and exits with code 2; the analysis commands accept `--json` for machine-readable output.
"""


def _markdown(text: str) -> str:
    """Help text as Markdown: no HTML tags, no emphasis (code spans left as they are)."""
    parts = re.split(r"(`[^`]*`)", text)
    for index in range(0, len(parts), 2):  # the even parts lie outside code spans
        for character, escaped in (("<", "&lt;"), (">", "&gt;"), ("*", "\\*")):
            parts[index] = parts[index].replace(character, escaped)
    return "".join(parts)


def _cell(text: str) -> str:
    """Help text as one Markdown table cell."""
    return " ".join(_markdown(text).replace("|", "\\|").split())


def _type_name(annotation: object) -> str:
    """A readable name of a parameter's declared type (``Annotated`` and ``Optional`` unwrapped)."""
    if typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    arguments = [argument for argument in typing.get_args(annotation) if argument is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(argument) for argument in arguments)
    if typing.get_origin(annotation) is list:
        return f"list of {_type_name(arguments[0])}"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return " \\| ".join(str(member.value) for member in annotation)
    if isinstance(annotation, type) and issubclass(annotation, Path):
        return "path"
    return getattr(annotation, "__name__", str(annotation))


def _default(parameter) -> str:
    default = parameter.default
    if parameter.required or default is None or (getattr(parameter, "is_flag", False) and default is False):
        return ""
    if isinstance(default, enum.Enum):
        default = default.value
    if isinstance(default, (list, tuple)):
        default = ",".join(str(value) for value in default)
    return f"`{default}`"


def _names(parameter) -> str:
    if parameter.param_type_name == "argument":
        return f"`{parameter.name.upper()}`"
    return " / ".join(f"`{name}`" for name in [*parameter.opts, *parameter.secondary_opts])


def _command_section(name: str, command) -> list[str]:
    hints = typing.get_type_hints(command.callback, include_extras=True) if command.callback else {}
    arguments = [parameter for parameter in command.params if parameter.param_type_name == "argument"]
    usage = " ".join(["tflabench", name, "[OPTIONS]", *(parameter.name.upper() for parameter in arguments)])
    description = _markdown(inspect.cleandoc(command.help or ""))
    lines = [f"## `{name}`", "", description, "", "```text", usage, "```", ""]
    parameters = [parameter for parameter in command.params if not getattr(parameter, "hidden", False)]
    if parameters:
        lines += ["| argument / option | type | default | description |", "|---|---|---|---|"]
        for parameter in parameters:
            is_flag = getattr(parameter, "is_flag", False)
            kind = "flag" if is_flag else _type_name(hints.get(parameter.name, str))
            required = " (required)" if parameter.required else ""
            lines.append(f"| {_names(parameter)} | {kind} | {_default(parameter)} | "
                         f"{_cell(getattr(parameter, 'help', None) or '')}{required} |")
        lines.append("")
    return lines


def render() -> str:
    """The whole page, one section per command in the app's order."""
    group = typer.main.get_command(app)
    lines = [HEADER]
    for name, command in group.commands.items():
        lines += _command_section(name, command)
    return "\n".join(lines).rstrip() + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output", type=Path, default=PAGE)
    output = parser.parse_args().output
    output.write_text(render())
    print(f"wrote {output}")


if __name__ == "__main__":
    main()
