"""Float64 references of every kernel family, in the suite's layout-neutral form, and random inputs for them.

Layout-neutral form (the layout of tflabench's own kernels and of FLA): tokens before heads,
q, k [B, T, H, Dqk], v [B, T, H, Dv], outputs [B, T, H, Dv]; per-token gates [B, T, H] (or [B, T, H, Dqk] for
GLA); per-head constants [H]. An adapter maps these inputs to its peer's layout and gate convention, runs
the peer and maps the output back; `reference_output` computes what the output must be.

Every reference computes in float64 from the inputs as given (low-precision inputs are widened exactly), so
a kernel and its reference see the same numbers. The forms are chosen to be independent of each other, so
that the cross-check mappings of baselines.md §14 compare different computations:

* softmax attention: masked softmax of the full score matrix;
* GLA: the recurrence over the [Dqk, Dv] state with a per-key-channel decay;
* simple GLA: the quadratic form with the decay matrix exp(sum of g over (j, i]);
* lightning: the quadratic form with the closed-form decay exp(lambda_h (i - j));
* Mamba2 SSD: the recurrence over the [N, P] state with grouped B and C;
* power attention: the quadratic normalized form with the scores raised to the power p;
* mLSTM: `tflabench.kernels.mlstm.reference` (recurrent form for the chunkwise kernels, whose m_0 is 0;
  parallel form for quadratic kernels, whose m_0 is -inf).

Tolerances (`TOLERANCES`): the relative error is ||out - ref||_F / ||ref||_F over the whole output. bf16
keeps 8 significant bits (one output rounding alone is up to 2^-9 relative), and kernels round their
intermediate matmul operands too, so 3e-2 in bf16; 1e-2 in fp16 (11 bits); 5e-3 in fp32, which admits
TF32 tensor-core matmuls (10-bit mantissa) that some peers use on GPUs. Every error this check exists for
(wrong layout, missing causal mask, wrong scale, gates in the wrong space, a dropped inter-chunk state, the
batch element 0 returned instead of the output) gives errors of order 0.1 to 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from tflabench.core import FAMILIES, SweepPoint

#: Largest accepted relative error (Frobenius norm of the difference over that of the reference), by dtype.
TOLERANCES = {"bfloat16": 3e-2, "float16": 1e-2, "float32": 5e-3, "float64": 1e-9}


def _f64(*tensors: Tensor) -> list[Tensor]:
    return [t.detach().to(torch.float64) for t in tensors]


def _causal(seq_len: int, device) -> Tensor:
    """[T, T] boolean, True where key position j <= query position i."""
    return torch.ones(seq_len, seq_len, dtype=torch.bool, device=device).tril()


def softmax_attention(q: Tensor, k: Tensor, v: Tensor, *, scale: float, causal: bool = True) -> Tensor:
    """softmax(scale q k^T + mask) v. q, k [B, T, H, Dqk]; v [B, T, H, Dv] -> [B, T, H, Dv]."""
    q, k, v = _f64(q, k, v)
    scores = torch.einsum("bihd,bjhd->bhij", q, k) * scale
    if causal:
        scores = scores.masked_fill(~_causal(q.shape[1], q.device), -math.inf)
    return torch.einsum("bhij,bjhv->bihv", scores.softmax(dim=-1), v)


def gla(q: Tensor, k: Tensor, v: Tensor, g: Tensor, *, scale: float) -> Tensor:
    """Gated linear attention, recurrent form: S_t = diag(exp(g_t)) S_{t-1} + k_t^T v_t, o_t = scale q_t S_t.

    q, k, g [B, T, H, Dqk] (g: log decay per key channel, <= 0); v [B, T, H, Dv] -> [B, T, H, Dv].
    """
    q, k, v, g = _f64(q, k, v, g)
    batch, seq_len, heads, head_dim_qk = q.shape
    state = q.new_zeros(batch, heads, head_dim_qk, v.shape[-1])
    outputs = []
    for t in range(seq_len):
        state = g[:, t].exp()[..., None] * state + k[:, t, :, :, None] * v[:, t, :, None, :]
        outputs.append(torch.einsum("bhk,bhkv->bhv", q[:, t] * scale, state))
    return torch.stack(outputs, dim=1)


def simple_gla(q: Tensor, k: Tensor, v: Tensor, g: Tensor, *, scale: float) -> Tensor:
    """Scalar-gated linear attention, quadratic form:
    o_i = scale sum_{j<=i} exp(sum_{l=j+1..i} g_l) (q_i.k_j) v_j.

    q, k [B, T, H, Dqk]; v [B, T, H, Dv]; g [B, T, H] log decay (<= 0) -> [B, T, H, Dv].
    """
    q, k, v, g = _f64(q, k, v, g)
    cumulative = g.cumsum(dim=1).transpose(1, 2)  # [B, H, T]
    log_decay = cumulative[..., :, None] - cumulative[..., None, :]
    log_decay = log_decay.masked_fill(~_causal(q.shape[1], q.device), -math.inf)
    scores = torch.einsum("bihd,bjhd->bhij", q, k) * scale * log_decay.exp()
    return torch.einsum("bhij,bjhv->bihv", scores, v)


def lightning(q: Tensor, k: Tensor, v: Tensor, log_decay: Tensor, *, scale: float) -> Tensor:
    """Linear attention with a fixed per-head decay:
    o_i = scale sum_{j<=i} exp(log_decay_h (i - j)) (q_i.k_j) v_j.

    q, k [B, T, H, Dqk]; v [B, T, H, Dv]; log_decay [H] (<= 0; minus LightningAttention-2's slope)
    -> [B, T, H, Dv].
    """
    q, k, v, log_decay = _f64(q, k, v, log_decay)
    positions = torch.arange(q.shape[1], device=q.device, dtype=torch.float64)
    distance = (positions[:, None] - positions[None, :]).clamp(min=0.0)
    decay = torch.exp(log_decay[:, None, None] * distance).masked_fill(~_causal(q.shape[1], q.device), 0.0)
    scores = torch.einsum("bihd,bjhd->bhij", q, k) * scale * decay
    return torch.einsum("bhij,bjhv->bihv", scores, v)


def mamba2_ssd(x: Tensor, dt: Tensor, A: Tensor, B: Tensor, C: Tensor, *, D: Tensor | None = None) -> Tensor:
    """Mamba2 state-space duality, recurrent form per head (heads grouped contiguously over B and C):
    h_t = exp(dt_t A) h_{t-1} + dt_t B_t x_t^T, y_t = C_t^T h_t (+ D x_t).

    x [B, T, H, P]; dt [B, T, H] (the step, already positive); A [H] (< 0); B, C [B, T, G, N] with G dividing
    H; D [H] or None -> y [B, T, H, P].
    """
    x, dt, A, B, C = _f64(x, dt, A, B, C)
    batch, seq_len, heads, head_dim = x.shape
    heads_per_group = heads // B.shape[2]
    B, C = (m.repeat_interleave(heads_per_group, dim=2) for m in (B, C))
    state = x.new_zeros(batch, heads, B.shape[-1], head_dim)
    outputs = []
    for t in range(seq_len):
        step = dt[:, t, :, None, None]
        state = torch.exp(step * A[:, None, None]) * state + step * B[:, t, :, :, None] * x[:, t, :, None, :]
        outputs.append(torch.einsum("bhn,bhnp->bhp", C[:, t], state))
    y = torch.stack(outputs, dim=1)
    if D is not None:
        y = y + D.to(torch.float64)[:, None] * x
    return y


def power_attention(
    q: Tensor, k: Tensor, v: Tensor, log_g: Tensor | None, *, degree: int, scale: float
) -> Tensor:
    """Gated, normalized power attention: w_ij = exp(G_i - G_j) (scale q_i.k_j)^p for j <= i with G the
    cumulative sum of log_g, and o_i = sum_j w_ij v_j / sum_j w_ij.

    q, k [B, T, H, Dqk]; v [B, T, H, Dv]; log_g [B, T, H] (<= 0) or None; even degree p -> [B, T, H, Dv].
    """
    q, k, v = _f64(q, k, v)
    weights = (torch.einsum("bihd,bjhd->bhij", q, k) * scale) ** degree
    mask = _causal(q.shape[1], q.device)
    if log_g is not None:
        cumulative = log_g.detach().to(torch.float64).cumsum(dim=1).transpose(1, 2)
        gaps = (cumulative[..., :, None] - cumulative[..., None, :]).masked_fill(~mask, -math.inf)
        weights = weights * gaps.exp()
    weights = weights.masked_fill(~mask, 0.0)
    return torch.einsum("bhij,bjhv->bihv", weights, v) / weights.sum(dim=-1).transpose(1, 2)[..., None]


def mlstm(
    q: Tensor, k: Tensor, v: Tensor, i: Tensor, f: Tensor, *, variant: str, normalize: bool | None = None,
    eps: float = 1e-6, formulation: str = "recurrent",
) -> Tensor:
    """mLSTM cell output h-tilde by `tflabench.kernels.mlstm.reference` in float64.

    q, k [B, T, H, Dqk]; v [B, T, H, Dv]; i, f [B, T, H] gate pre-activations -> [B, T, H, Dv].
    formulation "recurrent" (m_0 = 0, the chunkwise kernels' convention) or "parallel" (m_0 = -inf).
    """
    from tflabench.kernels.mlstm import reference

    q, k, v, i, f = _f64(q, k, v, i, f)
    if formulation == "parallel":
        return reference.mlstm_parallel(q, k, v, i, f, variant=variant, normalize=normalize, eps=eps)
    return reference.mlstm_recurrent(q, k, v, i, f, variant=variant, normalize=normalize, eps=eps)


def _mlstm_exp(**inputs: Any) -> Tensor:
    return mlstm(**inputs, variant="exp")


def _mlstm_sig(**inputs: Any) -> Tensor:
    return mlstm(**inputs, variant="sig")


#: family -> (reference function, names of the layout-neutral inputs it takes)
_REFERENCES = {
    "softmax_attention": (softmax_attention, ("q", "k", "v", "scale")),
    "gla": (gla, ("q", "k", "v", "g", "scale")),
    "simple_gla": (simple_gla, ("q", "k", "v", "g", "scale")),
    "lightning": (lightning, ("q", "k", "v", "log_decay", "scale")),
    "mamba2_ssd": (mamba2_ssd, ("x", "dt", "A", "B", "C")),
    "power_attention": (power_attention, ("q", "k", "v", "log_g", "degree", "scale")),
    "mlstm_exp": (_mlstm_exp, ("q", "k", "v", "i", "f", "eps", "formulation")),
    "mlstm_sig": (_mlstm_sig, ("q", "k", "v", "i", "f", "normalize", "eps", "formulation")),
}


def reference_output(family: str, inputs: Mapping[str, Any]) -> Tensor:
    """The float64 output of `family` for layout-neutral `inputs` (extra entries are ignored)."""
    function, names = _REFERENCES[family]
    missing = [name for name in names if name not in inputs]
    if missing:
        raise KeyError(f"{family} reference needs input(s) {', '.join(missing)}")
    return function(**{name: inputs[name] for name in names})


def relative_error(output: Tensor, reference: Tensor) -> float:
    """||output - reference||_F / ||reference||_F in float64; inf for a shape mismatch, nan if not finite."""
    if tuple(output.shape) != tuple(reference.shape):
        return math.inf
    reference = reference.to(torch.float64)
    difference = output.detach().to(torch.float64) - reference
    return float(torch.linalg.vector_norm(difference) / torch.linalg.vector_norm(reference))


def mismatch_summary(output: Tensor, reference: Tensor) -> str:
    """What a failed check's output looks like next to the reference [B, T, H, D]: norm ratio, non-finite
    entries, and the first time step whose relative error exceeds 10 % (garbage from some position on,
    a wrong mask, or scaled but otherwise right)."""
    output, reference = output.detach().to(torch.float64), reference.to(torch.float64)
    finite = torch.isfinite(output)
    norm_ratio = torch.linalg.vector_norm(output[finite]) / torch.linalg.vector_norm(reference)
    parts = [f"|out|/|ref| {norm_ratio:.3g}"]
    if not finite.all():
        parts.append(f"{int((~finite).sum())} non-finite entries")
    difference = torch.where(finite, output - reference, torch.zeros_like(output))
    def step_norms(x: Tensor) -> Tensor:  # [T]: the norm over everything but the time axis
        return x.transpose(0, 1).flatten(1).norm(dim=1)

    per_step = step_norms(difference) / step_norms(reference)
    wrong_steps = torch.nonzero(per_step > 0.1).flatten()
    if len(wrong_steps):
        parts.append(f"wrong from t = {int(wrong_steps[0])} of {output.shape[1]} ({len(wrong_steps)} steps)")
    return ", ".join(parts)


# ------------------------------------------------------------------------------------------- random inputs
def alibi_slopes(heads: int) -> Tensor:
    """ALiBi slopes lambda_h (float64 [H]): 2^(-8 (h+1) / H) for H a power of two; otherwise those of the
    largest power of two below H followed by every other slope of twice that (baselines.md §6.1)."""
    def power_of_two_slopes(n: int) -> list[float]:
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    base = 2 ** int(math.floor(math.log2(heads)))
    slopes = power_of_two_slopes(base)
    if base < heads:
        slopes += power_of_two_slopes(2 * base)[0::2][: heads - base]
    return torch.tensor(slopes, dtype=torch.float64)


def _generator(device: torch.device, seed: int | None) -> torch.Generator:
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(seed)
    return generator


def random_inputs(
    family: str, point: SweepPoint, device: torch.device | str = "cpu", *, seed: int | None = None,
    **fixed: Any,
) -> dict[str, Any]:
    """Fresh random layout-neutral inputs of `family` at the sizes of `point` (never zeros).

    Tensors entering matmuls (q, k, v, x, B, C) are in ``point.dtype``; gates, steps and decays are float32.
    ``fixed`` sets family constants and overrides defaults: ``scale`` (default Dqk^-1/2; lightning 1.0),
    ``log_decay`` [H] (lightning; default -ALiBi slopes), ``degree`` (power attention; default 2),
    ``ngroups`` (Mamba2 SSD; default 1), ``normalize`` / ``eps`` / ``formulation`` (mLSTM).
    """
    device = torch.device(device)
    generator = _generator(device, seed)
    dtype = getattr(torch, point.dtype)
    B, T, H, K, V = point.batch, point.seq_len, point.heads, point.head_dim_qk, point.head_dim_v

    def normal(*shape: int, mean: float = 0.0, out_dtype: torch.dtype = torch.float32) -> Tensor:
        values = torch.randn(*shape, generator=generator, device=device, dtype=torch.float32) + mean
        return values.to(out_dtype)

    def qkv() -> dict[str, Tensor]:
        return {"q": normal(B, T, H, K, out_dtype=dtype), "k": normal(B, T, H, K, out_dtype=dtype),
                "v": normal(B, T, H, V, out_dtype=dtype)}

    if family == "softmax_attention":
        inputs = {**qkv(), "scale": K**-0.5}
    elif family == "gla":
        inputs = {**qkv(), "g": F.logsigmoid(normal(B, T, H, K, mean=1.0)), "scale": K**-0.5}
    elif family == "simple_gla":
        inputs = {**qkv(), "g": F.logsigmoid(normal(B, T, H, mean=1.0)), "scale": K**-0.5}
    elif family == "lightning":
        inputs = {**qkv(), "log_decay": -alibi_slopes(H).to(device, torch.float32), "scale": 1.0}
    elif family == "mamba2_ssd":
        groups = fixed.get("ngroups", 1)
        inputs = {"x": normal(B, T, H, V, out_dtype=dtype), "dt": F.softplus(normal(B, T, H, mean=-1.0)),
                  "A": -torch.exp(normal(H, mean=0.5) * 0.5), "B": normal(B, T, groups, K, out_dtype=dtype),
                  "C": normal(B, T, groups, K, out_dtype=dtype)}
    elif family == "power_attention":
        inputs = {**qkv(), "log_g": F.logsigmoid(normal(B, T, H, mean=3.0)), "degree": 2, "scale": K**-0.5}
    elif family in ("mlstm_exp", "mlstm_sig"):
        inputs = {**qkv(), "i": normal(B, T, H), "f": normal(B, T, H, mean=3.0), "normalize": None,
                  "eps": 1e-6, "formulation": "recurrent"}
    else:
        raise ValueError(f"unknown family {family!r} (known: {', '.join(FAMILIES)})")
    return {**inputs, **fixed}
