"""Kernel families: one module per family (``tflabench.families.<name>``, its `Family` as ``FAMILY``).

A family's module holds its float64 reference, its random layout-neutral inputs and gate conventions, its
forward FLOP/byte model and its default chunk size. The names are `tflabench.core.FAMILIES`; a new family
is a new module here plus its name there (docs/adding-a-kernel.md).
"""

from __future__ import annotations

import importlib

from tflabench.core import FAMILIES
from tflabench.errors import InputError
from tflabench.families.base import Family


def family(name: str) -> Family:
    """The `Family` called ``name`` (its module is imported on first use)."""
    if name not in FAMILIES:
        raise InputError(f"unknown kernel family {name!r} (known: {', '.join(FAMILIES)})")
    return importlib.import_module(f"tflabench.families.{name}").FAMILY
