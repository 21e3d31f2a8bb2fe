"""Where a result comes from: the command line, the checkout's commit and the software versions. Shared by
the results of sweeps (`bench.results`) and the calibrations (`analysis.commands`)."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any


def command_line() -> str:
    """The command that is running, as a shell line starting with ``tflabench``."""
    return shlex.join(["tflabench", *sys.argv[1:]])


def git_state() -> dict[str, Any]:
    """Commit and dirty flag of the checkout. The environment variable TFLABENCH_GIT_COMMIT, when set,
    wins: a copy of the working tree on a GPU machine may carry no history, or a stale one."""
    if os.environ.get("TFLABENCH_GIT_COMMIT"):
        return {"commit": os.environ["TFLABENCH_GIT_COMMIT"], "dirty": None, "source": "TFLABENCH_GIT_COMMIT"}
    root = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True,
                              timeout=10).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"), "dirty": bool(git("status", "--porcelain"))}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "dirty": None}


def _distribution_version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def software_versions(packages: list[str]) -> dict[str, Any]:
    """Python, torch, CUDA, cuDNN, triton, numpy, tflabench, the version of our kernels' default tilings
    (`tilings.KERNELS_VERSION`) and the peers' versions."""
    import torch

    from tflabench.kernels.mlstm.tilings import KERNELS_VERSION

    versions: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.cuda.is_available() else None,
    }
    for name in ("triton", "numpy", "tflabench", "nvidia-ml-py"):
        versions[name] = _distribution_version(name)
    versions["tflabench_kernels"] = KERNELS_VERSION
    versions["peers"] = {name: _distribution_version(name) for name in sorted(set(packages))}
    return versions
