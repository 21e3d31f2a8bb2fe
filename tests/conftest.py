"""Test configuration.

On a machine without CUDA, Triton kernels run under the interpreter on CPU tensors; TRITON_INTERPRET
must be set before any module defining @triton.jit functions is imported.
"""

import os

import pytest

try:
    import torch

    _HAS_CUDA = torch.cuda.is_available()
except ImportError:  # pragma: no cover
    _HAS_CUDA = False

if not _HAS_CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item, call):
    """Keeps each phase's report on the test item (``item.report_call``), for fixtures whose teardown
    depends on the test's outcome."""
    report = yield
    setattr(item, f"report_{report.when}", report)
    return report
