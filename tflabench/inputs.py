"""Checks of command-line inputs that every command shares: numbers, input paths, output folders, run names.

Each check raises `tflabench.errors.InputError` naming the option and the problem, so a command runs all of
its checks before any work starts and the CLI prints one ``error:`` line with exit code 2. A dry run and a
real run call the same checks; only creating folders is left to the real run.

Writability is probed by creating (and at once removing) a file: permission bits do not tell, since the
superuser may write anywhere the file system allows, and ``/proc`` or ``/sys`` accept no new files at all.
"""

from __future__ import annotations

import math
import numbers
import os
import tempfile
from pathlib import Path

from tflabench.errors import InputError

#: Largest size (dimension, length, count) a command accepts: sizes beyond it describe no real problem.
MAX_SIZE = 2**31 - 1
#: Longest file name most file systems accept, in bytes.
MAX_NAME_BYTES = 255


# ----------------------------------------------------------------------------------------------- numbers


def positive_int(value: object, option: str, maximum: int = MAX_SIZE) -> int:
    """An integer in [1, maximum]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 < value <= maximum:
        raise InputError(f"{option} must be a positive integer (at most {maximum}), got {value!r}")
    return int(value)


def non_negative_int(value: object, option: str, maximum: int = MAX_SIZE) -> int:
    """An integer in [0, maximum]."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or not 0 <= value <= maximum:
        raise InputError(f"{option} must be an integer from 0 to {maximum}, got {value!r}")
    return int(value)


def finite_number(value: object, option: str, low: float = 0.0, high: float = math.inf,
                  low_inclusive: bool = False) -> float:
    """A finite real number above ``low`` (or equal to it if ``low_inclusive``) and at most ``high``."""
    is_real = isinstance(value, numbers.Real) and not isinstance(value, bool)
    above_low = is_real and (value >= low if low_inclusive else value > low)
    if not (is_real and math.isfinite(value) and above_low and value <= high):
        bound = f"{'at least' if low_inclusive else 'greater than'} {low:g}"
        upper = "" if high == math.inf else f" and at most {high:g}"
        raise InputError(f"{option} must be a finite number {bound}{upper}, got {value!r}")
    return float(value)


# ----------------------------------------------------------------------------------------------- paths


def path_kind(path: Path, option: str) -> str:
    """``"dir"``, ``"file"`` (anything else that exists) or ``"missing"``; a path the system cannot look up
    (NUL byte, name too long, no permission) is an InputError."""
    if "\0" in str(path):
        raise InputError(f"{option} {str(path)!r}: a path cannot contain a NUL character")
    try:
        if path.is_dir():
            return "dir"
        return "file" if path.exists() else "missing"
    except (OSError, ValueError) as exc:
        raise InputError(f"{option} {str(path)!r}: {_reason(exc)}") from None


def existing_dir(path: Path, option: str) -> Path:
    """A folder that exists."""
    kind = path_kind(path, option)
    if kind != "dir":
        problem = "not a directory" if kind == "file" else "does not exist"
        raise InputError(f"{option} {str(path)!r}: {problem}")
    return path


def output_dir(path: Path, option: str) -> Path:
    """A folder that exists and is writable, or that can be created: its nearest existing ancestor is a
    writable folder. Nothing is created (see `create_output_dir`)."""
    kind = path_kind(path, option)
    if kind == "file":
        raise InputError(f"{option} {str(path)!r} is a file, not a directory")
    ancestor = path if kind == "dir" else _nearest_existing(path, option)
    if path_kind(ancestor, option) != "dir":
        raise InputError(f"{option} {str(path)!r}: {str(ancestor)!r} is a file, not a directory")
    _probe_writable(ancestor, path, option)
    return path


def create_output_dir(path: Path, option: str) -> Path:
    """`output_dir`, then the folder created (with its parents)."""
    output_dir(path, option)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{option} {str(path)!r}: cannot create it ({_reason(exc)})") from None
    return path


def _nearest_existing(path: Path, option: str) -> Path:
    absolute = Path(os.path.abspath(path))
    for ancestor in absolute.parents:
        if path_kind(ancestor, option) != "missing":
            return ancestor
    return Path(absolute.anchor)


def _probe_writable(folder: Path, path: Path, option: str) -> None:
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        problem = f"cannot write in {str(folder)!r} ({_reason(exc)})"
        raise InputError(f"{option} {str(path)!r}: {problem}") from None


def _reason(exc: BaseException) -> str:
    return (exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)) or type(exc).__name__


# ----------------------------------------------------------------------------------------------- run names


def run_name(name: str, option: str = "--run-name") -> str:
    """A plain folder name: not empty, not ``.`` or ``..``, no path separator or NUL, at most 255 bytes;
    so ``<out>/<name>`` stays inside ``<out>``."""
    separators = {"/", os.sep, *([os.altsep] if os.altsep else [])}
    if not name or name in (".", "..") or any(char in name for char in (*separators, "\0")):
        raise InputError(f"{option}: invalid run name {name!r} (a plain directory name is expected)")
    if len(os.fsencode(name)) > MAX_NAME_BYTES:
        raise InputError(f"{option}: run name longer than {MAX_NAME_BYTES} bytes")
    return name


def runs_under(out: Path, markers: tuple[str, ...]) -> list[str]:
    """Names of the folders under ``out`` that hold one of the files ``markers`` (the runs there), sorted."""
    if path_kind(out, "--out") != "dir":
        return []
    try:
        return sorted(child.name for child in out.iterdir()
                      if any((child / marker).is_file() for marker in markers))
    except OSError:
        return []
