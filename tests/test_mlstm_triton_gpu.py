"""The TFLA Triton kernels at real sizes on the GPU (`pytest -m gpu`; skipped without CUDA).

* bf16, B = 1, T = 8192, 16 heads, Dqk 128, Dv 256, random initial state (C_0, n_0, m_0), loss
  sum(h * dh) + sum(C_T * dC): h, the final state (C, n, m) and every gradient (dq, dk, dv, di, df and dC0,
  the gradient of C_0) against `mlstm_chunkwise` in float64 on the GPU (the kernels' gradient convention,
  ``detach_normalizer=True``; reference chunk size 256). Both variants, xl_chunk at L = 64, 128, 256 (and
  512 for mLSTMexp), limit_chunk at L = 64.
* finite outputs and gradients at T = 65,536 (4 heads, L = 256), both variants, gates spread wide.
* a launch of more than 65,535 chunk programs (limit_chunk, Dqk = Dv = 32, 4 x 128 heads, L = 64) equals
  its batch elements launched alone.
* an fp16 smoke test at a small size.

Error measure: the relative Frobenius error ||x - x_ref|| / ||x_ref|| (absolute where x_ref = 0). The
errors are printed as a table at the end of the module (run with ``-s``) and written as JSON to the path
in $TFLABENCH_GPU_REPORT when it is set, also when a bound fails.

Gates: "long-memory" (i ~ N(0, 1), f ~ N(3, 1): the state of the previous chunk still carries weight
e^{-0.05 t} at token t of a chunk, so the inter-chunk state kernels matter for h) for every case, and
"short-memory" (i, f ~ N(0, 1), as in scripts/bench_tfla_vs_reference.py) at L = 128.

Bounds (BOUNDS): measured in bf16 with short-memory gates, h, dq, dk, dv and di are ~2.5e-3 and df ~1e-2
to 5e-2: df_t is a reverse cumulative sum over all later tokens of q.dq - k.dk, so the bf16 rounding of
thousands of terms adds up while the true value stays local. The bounds leave ~4x headroom (1e-2; df
0.1). The final state and dC0 come from the same bf16 operands (1e-2); m depends only on the gates,
computed in fp32 (1e-3).
"""

from __future__ import annotations

import gc
import json
import math
import os
from dataclasses import dataclass, replace
from functools import partial

import pytest
import torch
from torch import Tensor

from tflabench.kernels import mlstm
from tflabench.kernels.mlstm import tilings
from tflabench.kernels.mlstm.choice import Shape
from tflabench.kernels.mlstm.reference import mlstm_chunkwise
from tflabench.kernels.mlstm.xl_chunk import mlstm_xl_chunk

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
]

F32, F64 = torch.float32, torch.float64
REFERENCE_CHUNK = 256
REPORT_ENV = "TFLABENCH_GPU_REPORT"
LEAK_LIMIT = 128 << 20  # bytes: cuBLAS workspaces stay allocated after the first matmuls; a leaked
# forward context at the bf16 size holds q, k, v and the chunk states, several hundred MiB
BOUNDS = {
    "h": 1e-2,
    "C": 1e-2,
    "n": 1e-2,
    "m": 1e-3,
    "dq": 1e-2,
    "dk": 1e-2,
    "dv": 1e-2,
    "di": 1e-2,
    "df": 0.1,
    "dC0": 1e-2,
}
GATES = {  # (mean, std) of the pre-activations (i, f)
    "long-memory": ((0.0, 1.0), (3.0, 1.0)),
    "short-memory": ((0.0, 1.0), (0.0, 1.0)),
    "wide": ((0.0, 3.0), (3.0, 4.0)),
}


#: the GPU suite's shape: the TFLA paper's Fig. 4 configuration at S = 8192, one sequence
FIG4 = Shape(batch=1, seq_len=8192, heads=16, head_dim_qk=128, head_dim_v=256)


@dataclass(frozen=True)
class Case:
    variant: str
    normalize: bool | None
    algorithm: str
    chunk_size: int
    gates: str = "long-memory"
    recompute_states_in_bw: bool = True
    tiling: str | None = None  # xl_chunk's tiling text (`tilings.overrides`); None: the default tiling

    @property
    def name(self) -> str:
        cell = self.variant + ("-normalized" if self.normalize else "")
        kept = "" if self.recompute_states_in_bw else "-kept-states"
        tiling = "" if self.tiling is None else f"-{self.tiling}"
        return f"{cell}-{self.algorithm}-L{self.chunk_size}-{self.gates}{kept}{tiling}"


BF16_CASES = [
    *(Case("exp", None, "xl_chunk", chunk) for chunk in (64, 128, 256, 512)),
    *(Case("sig", False, "xl_chunk", chunk) for chunk in (64, 128, 256)),
    Case("sig", True, "xl_chunk", 128),
    Case("exp", None, "limit_chunk", 64),
    Case("sig", False, "limit_chunk", 64),
    Case("exp", None, "xl_chunk", 128, gates="short-memory"),
    Case("sig", False, "xl_chunk", 128, gates="short-memory"),
    Case("exp", None, "xl_chunk", 128, recompute_states_in_bw=False),
    Case("sig", False, "xl_chunk", 256, recompute_states_in_bw=False),
    Case("sig", False, "limit_chunk", 64, recompute_states_in_bw=False),
    *(Case(variant, normalize, "fused_chunk", chunk) for variant, normalize in (("exp", None), ("sig", False))
      for chunk in (32, 64, 128)),
    Case("sig", True, "fused_chunk", 64),
    Case("exp", None, "fused_chunk", 64, gates="short-memory"),
    Case("sig", False, "fused_chunk", 64, gates="short-memory"),
    *(Case(variant, normalize, "xl_chunk", chunk, tiling="dq_from_diagonal=true")
      for variant, normalize in (("exp", None), ("sig", False)) for chunk in (128, 512)),
]


SMALL_HEAD_DIM_CASES = [
    *(Case(variant, normalize, algorithm, 64) for variant, normalize in (("exp", None), ("sig", False))
      for algorithm in ("xl_chunk", "limit_chunk", "fused_chunk")),
    Case("exp", None, "xl_chunk", 64, recompute_states_in_bw=False),
]
SMALL_HEAD_DIM_SHAPES = {
    "qk64-v32": Shape(batch=2, seq_len=128, heads=2, head_dim_qk=64, head_dim_v=32),
    "qk32-v32": Shape(batch=2, seq_len=256, heads=4, head_dim_qk=32, head_dim_v=32),
    "qk80-v192": Shape(batch=2, seq_len=512, heads=4, head_dim_qk=80, head_dim_v=192),
    "qk96-v96": Shape(batch=2, seq_len=512, heads=4, head_dim_qk=96, head_dim_v=96),
}


@dataclass(frozen=True)
class Problem:
    """Inputs q, k [B, T, H, Dqk], v [B, T, H, Dv], i, f [B, T, H] (input dtype); initial state
    (C [B, H, Dqk, Dv], n [B, H, Dqk], m [B, H]) fp32; cotangents dh (input dtype) and dc (fp32)."""

    inputs: dict[str, Tensor]
    initial_state: tuple[Tensor, Tensor, Tensor]
    dh: Tensor
    dc: Tensor


def make_problem(seed: int, shape: Shape, gates: str, dtype: torch.dtype, device: str = "cuda") -> Problem:
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*dims, mean=0.0, std=1.0, dtype=dtype):
        return (mean + std * torch.randn(*dims, generator=gen, device=device)).to(dtype)

    B, T, H, DQK, DV = shape.batch, shape.seq_len, shape.heads, shape.head_dim_qk, shape.head_dim_v
    (i_mean, i_std), (f_mean, f_std) = GATES[gates]
    inputs = dict(
        q=randn(B, T, H, DQK),
        k=randn(B, T, H, DQK),
        v=randn(B, T, H, DV),
        i=randn(B, T, H, mean=i_mean, std=i_std),
        f=randn(B, T, H, mean=f_mean, std=f_std),
    )
    initial_state = (randn(B, H, DQK, DV, dtype=F32), randn(B, H, DQK, dtype=F32), randn(B, H, dtype=F32))
    return Problem(inputs, initial_state, dh=randn(B, T, H, DV), dc=randn(B, H, DQK, DV, dtype=F32))


def run(function, problem: Problem, input_dtype: torch.dtype, state_dtype: torch.dtype) -> dict[str, Tensor]:
    """h, C, n, m and the gradients dq, dk, dv, di, df, dC0 of sum(h * dh) + sum(C_T * dc), detached.

    function(q, k, v, i, f, initial_state=, return_final_state=True) -> (h, (C, n, m)).
    """
    leaves = {name: x.to(input_dtype, copy=True).requires_grad_() for name, x in problem.inputs.items()}
    c0, n0, m0 = (x.to(state_dtype, copy=True) for x in problem.initial_state)
    leaves["C0"] = c0.requires_grad_()
    h, (c, n, m) = function(
        **{name: leaves[name] for name in "qkvif"}, initial_state=(c0, n0, m0), return_final_state=True
    )
    loss = (h * problem.dh.to(h.dtype)).sum() + (c * problem.dc.to(c.dtype)).sum()
    loss.backward()
    outputs = {"h": h.detach(), "C": c.detach(), "n": n.detach(), "m": m.detach()}
    outputs.update((f"d{name}", leaf.grad) for name, leaf in leaves.items())
    return outputs


def relative_error(actual: Tensor, expected: Tensor) -> float:
    """||actual - expected|| / ||expected|| (Frobenius, float64); absolute where expected is 0; NaN or inf
    when anything is not finite."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    difference = (actual.double() - expected.double()).norm()
    scale = expected.double().norm()
    return (difference / scale).item() if scale > 0 else difference.item()


def errors_against_reference(
    case: Case, shape: Shape, dtype: torch.dtype, seed: int = 0, device: str = "cuda"
) -> dict[str, float]:
    """Relative error of every output and gradient of the kernel; the tensors are freed on return."""
    problem = make_problem(seed, shape, case.gates, dtype, device)
    cell = dict(variant=case.variant, normalize=case.normalize)
    if case.tiling is None:
        function = partial(mlstm, **cell, algorithm=case.algorithm, chunk_size=case.chunk_size,
                           recompute_states_in_bw=case.recompute_states_in_bw)
    else:
        options = tilings.launch_options(case.algorithm, case.tiling, chunk=case.chunk_size,
                                         variant=case.variant, head_dim_qk=shape.head_dim_qk,
                                         head_dim_v=shape.head_dim_v)
        function = partial(mlstm_xl_chunk, **cell, eps=1e-6, chunk_size=case.chunk_size,
                           recompute_states_in_bw=case.recompute_states_in_bw, **options)
    kernel = run(function, problem, dtype, F32)
    assert kernel["h"].dtype == dtype and kernel["dq"].dtype == dtype and kernel["C"].dtype == F32
    reference_chunk = min(REFERENCE_CHUNK, shape.seq_len)
    reference = run(
        partial(mlstm_chunkwise, **cell, chunk_size=reference_chunk, detach_normalizer=True),
        problem,
        F64,
        F64,
    )
    return {name: relative_error(kernel[name], reference[name]) for name in BOUNDS}


def norms_of_outputs_and_gradients(
    variant: str, shape: Shape, algorithm: str, chunk_size: int, dtype: torch.dtype, seed: int = 0,
    device: str = "cuda"
) -> dict[str, float]:
    """Frobenius norms (inf or NaN if not finite) of h, C, n, m and every gradient, with "wide" gates."""
    problem = make_problem(seed, shape, "wide", dtype, device)
    function = partial(mlstm, variant=variant, algorithm=algorithm, chunk_size=chunk_size)
    outputs = run(function, problem, dtype, F32)
    return {name: x.double().norm().item() for name, x in outputs.items()}


def bound_violations(errors: dict[str, float]) -> dict[str, float]:
    return {name: error for name, error in errors.items() if not error <= BOUNDS[name]}


# --- report and memory fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu_report():
    """Rows of the error report: printed as a table after the module's tests and written as JSON to
    $TFLABENCH_GPU_REPORT when set."""
    rows: list[dict] = []
    yield rows
    print("\n" + format_table(rows))
    path = os.environ.get(REPORT_ENV)
    if path:
        report = dict(
            device=torch.cuda.get_device_name(),
            torch=torch.__version__,
            triton=_triton_version(),
            measure="relative Frobenius error vs float64 reference",
            bounds=BOUNDS,
            rows=rows,
        )
        with open(path, "w") as file:
            json.dump(report, file, indent=2)


def _triton_version() -> str | None:
    try:
        import triton
    except ImportError:
        return None
    return triton.__version__


def format_table(rows: list[dict]) -> str:
    """One line per row: the relative errors (the norms, for the finiteness rows) per BOUNDS key."""
    columns = list(BOUNDS)
    lines = [
        f"TFLA kernels on {torch.cuda.get_device_name()}: relative Frobenius error vs float64 reference",
        f"{'case':<46}" + "".join(f"{name:>9}" for name in columns) + "  ok",
    ]
    for row in rows:
        values = row.get("errors") or row["norms"]
        cells = "".join(f"{values[name]:>9.1e}" if name in values else " " * 9 for name in columns)
        lines.append(f"{row['case']:<46}{cells}  {'yes' if row['ok'] else 'NO'}")
    lines.append("bounds: " + ", ".join(f"{name} {bound:g}" for name, bound in BOUNDS.items()))
    lines.append("finite-* rows: norms of the outputs and gradients, not errors")
    return "\n".join(lines)


@pytest.fixture(autouse=True)
def gives_its_gpu_memory_back(request):
    """The GPU is shared by the run: each test must release what it allocated. A failed test's traceback
    still holds its tensors: its memory is not checked (the failure is reported already)."""
    gc.collect()
    torch.cuda.empty_cache()
    before = torch.cuda.memory_allocated()
    yield
    report = getattr(request.node, "report_call", None)
    if report is not None and report.failed:
        return
    gc.collect()
    torch.cuda.empty_cache()
    leaked = torch.cuda.memory_allocated() - before
    assert leaked <= LEAK_LIMIT, f"{leaked / 2**20:.0f} MiB of GPU memory still allocated after the test"


# --- tests -------------------------------------------------------------------------------------------------


def check_bf16_against_reference(case: Case, shape: Shape, report: list[dict], label: str = "") -> None:
    errors = errors_against_reference(case, shape, torch.bfloat16)
    violations = bound_violations(errors)
    case_name = case.name + label
    report.append(dict(case=case_name, dtype="bfloat16", shape=vars(shape), errors=errors, ok=not violations))
    print(f"\n{case_name}: " + ", ".join(f"{name} {error:.1e}" for name, error in errors.items()))
    assert not violations, f"relative errors above BOUNDS: {violations}"


@pytest.mark.parametrize("case", BF16_CASES, ids=lambda case: case.name)
def test_bf16_output_and_gradients_match_float64_reference(case, gpu_report):
    check_bf16_against_reference(case, FIG4, gpu_report)


@pytest.mark.parametrize("case", SMALL_HEAD_DIM_CASES, ids=lambda case: case.name)
@pytest.mark.parametrize("shape_name", SMALL_HEAD_DIM_SHAPES)
def test_bf16_at_small_head_dims_matches_float64_reference(case, shape_name, gpu_report):
    """The harness's check size (Dqk 64 / Dv 32) and the head-dim sweep's smallest (32 / 32): one value
    block and one query block per chunk, where Triton 3.6 once compiled the output kernel into one reading
    shared memory out of bounds (compute-sanitizer on an H200), while every test at 128 / 256 passed; and
    head dims no power of two divides (80, 96: the TFLA kernels' masked 64- and 128-wide blocks)."""
    check_bf16_against_reference(case, SMALL_HEAD_DIM_SHAPES[shape_name], gpu_report, f"-{shape_name}")


@pytest.mark.parametrize("algorithm, chunk_size", [("xl_chunk", 256), ("fused_chunk", 64)])
@pytest.mark.parametrize("variant", ["exp", "sig"])
def test_outputs_and_gradients_are_finite_at_64k_tokens(variant, algorithm, chunk_size, gpu_report):
    shape = replace(FIG4, seq_len=65536, heads=4)
    norms = norms_of_outputs_and_gradients(variant, shape, algorithm, chunk_size, dtype=torch.bfloat16)
    bad = {name: norm for name, norm in norms.items() if not math.isfinite(norm)}
    unused = {"n", "m"} if variant == "sig" else set()  # unnormalized sig: n = m = 0
    zero = sorted(name for name, norm in norms.items() if norm == 0 and name not in unused)
    gpu_report.append(
        dict(
            case=f"finite-{variant}-{algorithm}-L{chunk_size}-T65536",
            dtype="bfloat16",
            shape=vars(shape),
            norms=norms,
            ok=not bad and not zero,
        )
    )
    assert not bad, f"not finite: {bad}"
    assert not zero, f"all zero: {zero}"


DF_ROUNDING = 1e-3  # relative: a few bf16 roundings (2^-8 each) that fall the other way


def _batch_element(problem: Problem, index: int) -> Problem:
    """Batch element ``index`` of ``problem`` as a problem of batch 1."""
    def element(x: Tensor) -> Tensor:
        return x[index : index + 1]

    return Problem({name: element(x) for name, x in problem.inputs.items()},
                   tuple(element(x) for x in problem.initial_state), element(problem.dh), element(problem.dc))


@pytest.mark.parametrize("variant", ["exp", "sig"])
def test_more_than_65535_chunk_programs_match_the_batch_elements_run_alone(variant, gpu_report):
    """NC * B * H = 128 * 4 * 128 = 65,536 programs per tile block: one more than a CUDA grid's y/z axis
    takes (the head-dim sweep's Dqk = Dv = 32 at L = 64 failed with "invalid argument" before the chunk
    programs moved onto the grid's x axis). Each batch element alone launches a quarter of that; the
    outputs and gradients must be the same: the kernels' within 1e-6; df, whose reverse cumulative sum over
    T runs in torch (its summation order depends on the number of rows, measured 5e-5 on the H200) and is
    then rounded to bf16, within ``DF_ROUNDING``."""
    shape = Shape(batch=4, seq_len=8192, heads=128, head_dim_qk=32, head_dim_v=32)
    problem = make_problem(0, shape, "long-memory", torch.bfloat16)
    function = partial(mlstm, variant=variant, algorithm="limit_chunk", chunk_size=64)
    whole = run(function, problem, torch.bfloat16, F32)
    alone = [run(function, _batch_element(problem, index), torch.bfloat16, F32)
             for index in range(shape.batch)]
    errors = {name: relative_error(whole[name], torch.cat([part[name] for part in alone])) for name in BOUNDS}
    different = {name: error for name, error in errors.items()
                 if not error <= (DF_ROUNDING if name == "df" else 1e-6)}
    gpu_report.append(dict(case=f"grid-x-{variant}-limit_chunk-L64-65536-programs", dtype="bfloat16",
                           shape=vars(shape), errors=errors, ok=not different))
    assert not different, f"whole batch differs from the batch elements run alone: {different}"


@pytest.mark.parametrize("algorithm", ["xl_chunk", "fused_chunk"])
@pytest.mark.parametrize("variant, normalize", [("exp", None), ("sig", False)], ids=["exp", "sig"])
def test_fp16_smoke(variant, normalize, algorithm, gpu_report):
    case = Case(variant, normalize, algorithm, 64)
    shape = Shape(batch=2, seq_len=1024, heads=4, head_dim_qk=64, head_dim_v=128)
    errors = errors_against_reference(case, shape, torch.float16)
    violations = bound_violations(errors)
    gpu_report.append(
        dict(case=f"{case.name}-fp16", dtype="float16", shape=vars(shape), errors=errors, ok=not violations)
    )
    assert not violations, f"relative errors above BOUNDS: {violations}"
