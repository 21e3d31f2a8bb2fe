"""GPU acceptance of the adapters (``pytest -m gpu``): every available kernel passes its reference check in
bf16 at its small check size and at the head dims and chunk size of its Fig. 4 configuration (the check
the sweep's gate runs before timing it there), and the deliberately wrong adapter (SDPA FLASH without the
causal mask) is rejected by the same check.

Each check runs in its own process with a time limit (`isolated_checks`): a peer may abort the compiler
(mlstm_kernels' mLSTMexp xl_chunk on Hopper with Triton 3.6, an expected failure here) or autotune for
minutes. The checks run concurrently, once per module, and each test reads its kernel's outcome.
"""

import io
import json
import os
from contextlib import redirect_stdout

import pytest
import torch

from tflabench.bench.isolated_checks import (
    FAILED,
    PASSED,
    known_failure,
    run_checks,
)
from tflabench.bench.registry import all_kernels
from tflabench.bench.sweep import expand, load_preset
from tflabench.cli import main
from tflabench.core import SweepPoint

pytestmark = pytest.mark.gpu

KERNELS = sorted(all_kernels())
WRONG_KERNEL = "wrong.sdpa_flash_non_causal"
CHECK_TIMEOUT_S, JOBS = 300.0, 6
#: all checks end within this many seconds (a 10-minute device command; lower it to share the command)
DEADLINE_S = float(os.environ.get("TFLABENCH_GPU_CHECK_DEADLINE_S", 540.0))


@pytest.fixture(scope="module")
def outcomes():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    kernels = all_kernels()
    names = [name for name in KERNELS if kernels[name].availability().available] + [WRONG_KERNEL]
    results = run_checks(names, "bfloat16", "cuda", timeout_s=CHECK_TIMEOUT_S, jobs=JOBS,
                         deadline_s=DEADLINE_S)
    return {outcome.kernel: outcome for outcome in results}


def fig4_configurations() -> dict[str, SweepPoint]:
    """Each available kernel's forward point of the tfla-fig4 preset at S = 8192."""
    jobs = expand(load_preset("tfla-fig4"), all_kernels())
    return {job.kernel.name: job.point for job in jobs
            if job.status is None and job.point.seq_len == 8192 and job.point.mode == "fwd"}


@pytest.fixture(scope="module")
def fig4_outcomes():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    configurations = fig4_configurations()
    results = run_checks(sorted(configurations), "bfloat16", "cuda", timeout_s=CHECK_TIMEOUT_S, jobs=JOBS,
                         deadline_s=DEADLINE_S, configurations=configurations)
    return {outcome.kernel: outcome for outcome in results}


def assert_passed(name: str, outcome) -> None:
    known = known_failure(outcome)
    if known is not None:
        pytest.xfail(f"{known.note}: {outcome.status} {outcome.detail}")
    assert outcome.status == PASSED, outcome


@pytest.mark.parametrize("name", KERNELS)
def test_available_kernel_passes_its_bf16_reference_check(name, outcomes):
    availability = all_kernels()[name].availability()
    if not availability.available:
        pytest.skip(f"unavailable: {availability.reason}")
    assert_passed(name, outcomes[name])


@pytest.mark.parametrize("name", KERNELS)
def test_available_kernel_passes_its_check_at_its_fig4_configuration(name, fig4_outcomes):
    if name not in fig4_outcomes:
        pytest.skip("not measured in the tfla-fig4 preset (unavailable, or no supported point at S = 8192)")
    assert_passed(name, fig4_outcomes[name])


def test_the_non_causal_attention_adapter_is_caught(outcomes):
    outcome = outcomes[WRONG_KERNEL]
    assert outcome.status == FAILED and outcome.rel_error > 0.1, outcome


def test_kernels_listing_shows_the_builtin_attention_backends_available():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    out = io.StringIO()
    with redirect_stdout(out):
        main(["kernels", "--json"])
    listing = json.loads(out.getvalue())
    rows = {row["name"]: row for row in listing["kernels"]}
    assert listing["device"] == "cuda"
    assert rows["torch.sdpa.efficient"]["available"], rows["torch.sdpa.efficient"]["reason"]
