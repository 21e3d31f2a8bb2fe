"""`tflabench kernels`: every registered kernel with its availability here; `tflabench bundle`: an offline
wheel bundle of the peer packages for GPU machines without internet access.

The bundle holds pure-Python wheels only (cpu-and-gpu-environments.md): fla-core, mlstm-kernels,
lightning-attn, retention and einops are downloaded as wheels for the target Python and platform, and
mamba-ssm, which ships only a source distribution, is built here into a pure-Python wheel with its CUDA
extension skipped (its Triton SSD ops do not need the extension). ``make install-offline WHEELS=<dest>``
installs the bundle with ``pip install --no-index --no-deps``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from tflabench.errors import InputError
from tflabench.inputs import output_dir

#: peers distributed as pure-Python wheels (the versions of pyproject's ``peers`` extra)
PURE_WHEELS = (
    "fla-core==0.6.0", "mlstm-kernels==2.0.6", "lightning-attn==0.0.5", "retention==1.0.7", "einops",
)
#: mamba-ssm has only a source distribution; built without its CUDA extension
MAMBA_SDIST = "mamba-ssm==2.3.2.post1"
MAMBA_BUILD_ENV = {"MAMBA_FORCE_BUILD": "TRUE", "MAMBA_SKIP_CUDA_BUILD": "TRUE"}
#: modules the mamba-ssm build imports here (its setup.py imports torch)
MAMBA_BUILD_MODULES = ("setuptools", "packaging", "torch")
CHECKSUMS_FILE = "SHA256SUMS"
_PIP_TAIL_LINES = 15
#: table width when stdout is not a terminal (rich would wrap at 80 columns)
_FILE_WIDTH = 200


def register(app) -> None:
    app.command(name="kernels")(kernels)
    app.command(name="bundle")(bundle)


# ------------------------------------------------------------------------------------------------ kernels
def kernel_rows() -> list[dict[str, Any]]:
    """One row per registered kernel, sorted by name: name, family, package, version, available, reason,
    modes, mode_reasons, uses_chunk_size, params."""
    from tflabench.bench.registry import Availability, all_kernels

    rows = []
    for name, spec in sorted(all_kernels().items()):
        try:
            availability = spec.availability()
        except Exception as exc:  # a broken adapter must not hide the others
            availability = Availability(False, f"availability check raised {type(exc).__name__}: {exc}")
        rows.append({
            "name": name, "family": spec.family, "package": spec.package, "version": availability.version,
            "available": availability.available, "reason": availability.reason, "modes": list(spec.modes),
            "mode_reasons": dict(spec.mode_reasons), "uses_chunk_size": spec.uses_chunk_size,
            "params": spec.params,
        })
    return rows


def kernels(
    json_output: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False,
) -> None:
    """List every registered kernel: family, availability, package version and the reason if unavailable."""
    from tflabench.bench.measure import prepare_device

    device = prepare_device()
    rows = kernel_rows()
    if json_output:
        typer.echo(json.dumps({"device": device, "kernels": rows}, indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    available = sum(row["available"] for row in rows)
    table = Table("kernel", "family", "available", "package", "version", "reason",
                  title=f"{len(rows)} kernels, {available} available ({device})")
    for row in rows:
        notes = [row["reason"]] if row["reason"] else []
        notes += [f"{mode}: {reason}" for mode, reason in row["mode_reasons"].items()]
        table.add_row(row["name"], row["family"], "yes" if row["available"] else "no",
                      row["package"] or "-", row["version"] or "-", "; ".join(notes))
    Console(width=None if sys.stdout.isatty() else _FILE_WIDTH).print(table)


# ------------------------------------------------------------------------------------------------- bundle
def download_command(python: str, platform: str, dest: Path) -> list[str]:
    """pip download of the pure-Python peer wheels for the target interpreter and platform."""
    return [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
            "--python-version", python, "--platform", platform, "--dest", str(dest), *PURE_WHEELS]


def mamba_build_command(dest: Path) -> list[str]:
    """pip wheel of mamba-ssm from its source distribution (run with `MAMBA_BUILD_ENV`)."""
    return [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
            "--no-binary", "mamba-ssm", "--wheel-dir", str(dest), MAMBA_SDIST]


def _run_pip(command: list[str], env: dict[str, str] | None = None) -> None:
    shown = " ".join(f"{name}={value}" for name, value in (env or {}).items())
    typer.echo(f"$ {shown + ' ' if shown else ''}{shlex.join(command)}")
    result = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if result.returncode:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-_PIP_TAIL_LINES:])
        typer.echo(f"error: pip exited with {result.returncode}:\n{tail}", err=True)
        raise typer.Exit(1)


def _check_build_modules() -> None:
    import importlib.util

    missing = [name for name in MAMBA_BUILD_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        names = " ".join(missing)
        raise InputError(f"building {MAMBA_SDIST} here needs {names}: pip install {names}")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_checksums(dest: Path) -> list[tuple[Path, str]]:
    """SHA256SUMS of every wheel in dest (``sha256sum -c SHA256SUMS`` verifies the copy)."""
    wheels = [(path, _sha256(path)) for path in sorted(dest.glob("*.whl"))]
    (dest / CHECKSUMS_FILE).write_text("".join(f"{digest}  {path.name}\n" for path, digest in wheels))
    return wheels


def bundle(
    python: Annotated[str, typer.Option(help="Target Python version, e.g. 3.12.")] = "3.12",
    platform: Annotated[str, typer.Option(help="Target platform tag.")] = "manylinux_2_28_x86_64",
    dest: Annotated[Path, typer.Option(help="Directory for the wheels (created).")] = Path("wheels"),
) -> None:
    """Build an offline wheel bundle of the peers (pure-Python wheels; mamba-ssm built from its sdist)."""
    if not re.fullmatch(r"3\.\d+", python):
        raise InputError(f"--python must look like 3.12, got {python!r}")
    if not re.fullmatch(r"[a-z0-9_]+", platform):
        raise InputError(f"--platform must be a platform tag such as manylinux_2_28_x86_64, got {platform!r}")
    output_dir(dest, "--dest")
    _check_build_modules()
    dest.mkdir(parents=True, exist_ok=True)
    _run_pip(download_command(python, platform, dest))
    _run_pip(mamba_build_command(dest), env=MAMBA_BUILD_ENV)
    wheels = _write_checksums(dest)
    impure = [path.name for path, _ in wheels if not path.name.endswith("-none-any.whl")]
    for path, digest in wheels:
        typer.echo(f"{path.name}  {path.stat().st_size / 1024:.0f} KiB  sha256 {digest[:16]}")
    typer.echo(f"{len(wheels)} wheels and {CHECKSUMS_FILE} in {dest}; install offline with "
               f"`make install-offline WHEELS={dest}`")
    if impure:
        raise InputError(f"not pure-Python (platform-specific) wheels in {dest}: {', '.join(impure)}")
