"""The public mLSTM entry point `mlstm`: input validation and dispatch to an algorithm.

Algorithms (modules relative to `tflabench.kernels.mlstm`):
    "auto"         the measured best for the shape, the GPU and whether a backward pass follows
                   (`choice.choose`, which also picks the chunk size when chunk_size is None)
    "xl_chunk"     TFLA Triton kernels, `xl_chunk.mlstm_xl_chunk`
    "limit_chunk"  single-level chunkwise Triton kernels, `xl_chunk.mlstm_limit_chunk`
    "fused_chunk"  one program per (head-dim block, batch, head) walks the chunks with the state on chip,
                   `fused_chunk.mlstm_fused_chunk`
    "parallel"     the plain-PyTorch quadratic form, `reference.mlstm_parallel` (m_0 = -inf, no states)
    "recurrent"    the plain-PyTorch step loop, `reference.mlstm_recurrent` (m_0 = 0)

The Triton kernels are imported only when asked for. Through this entry point the references use the
kernels' gradient convention (``detach_normalizer=True``: max states and denominator are constants, §5.1),
so that every algorithm defines the same gradient.

Accepted inputs (anything else raises `tflabench.errors.InputError`, a ValueError, naming the problem):
    q, k [B, T, H, Dqk]; v [B, T, H, Dv]; i, f [B, T, H]; B, T, H >= 1 and equal across tensors;
    head dims Dqk, Dv: multiples of 16 from 16 to 1024;
    dtypes: bfloat16, float16, float32 or float64; q, k, v of one dtype; all tensors on one device;
    chunk_size (chunked algorithms only): None (the algorithm's measured default) or a power of two >= 16
    that divides T (limit_chunk and fused_chunk: <= 128);
    initial_state: (C [B, H, Dqk, Dv], n [B, H, Dqk] or None, m [B, H] or None), not with "parallel";
    recompute_states_in_bw: True or False.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tflabench.errors import InputError
from tflabench.kernels.mlstm import reference
from tflabench.kernels.mlstm.launch import ONE_TILE_CHUNK_MAX
from tflabench.kernels.mlstm.reference import VARIANTS, InitialState, State

CHUNKED_ALGORITHMS = ("xl_chunk", "limit_chunk", "fused_chunk")
ALGORITHMS = ("auto", *CHUNKED_ALGORITHMS, "parallel", "recurrent")
DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64)
MIN_HEAD_DIM, MAX_HEAD_DIM, HEAD_DIM_MULTIPLE = 16, 1024, 16
MIN_CHUNK_SIZE = 16


def mlstm(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    i: Tensor,
    f: Tensor,
    *,
    variant: str = "exp",
    algorithm: str = "auto",
    chunk_size: int | None = None,
    normalize: bool | None = None,
    eps: float = 1e-6,
    initial_state: InitialState | None = None,
    return_final_state: bool = False,
    recompute_states_in_bw: bool = True,
) -> Tensor | tuple[Tensor, State]:
    """mLSTM cell output h-tilde (before output gate and NORM), autograd-capable.

    q, k: [B, T, H, Dqk] (unscaled; 1/sqrt(Dqk) is applied inside); v: [B, T, H, Dv]; i, f: [B, T, H] gate
    pre-activations. variant "exp" (always normalized) or "sig" (``normalize`` default False). Returns
    h [B, T, H, Dv] in the dtype of q and, with ``return_final_state``, also the final state
    (C [B, H, Dqk, Dv], n [B, H, Dqk], m [B, H]) in float32 (float64 for float64 inputs).
    algorithm "auto" and chunk_size None choose from the measured table (`choice.choose`, which says why).
    recompute_states_in_bw (xl_chunk and limit_chunk; as the reference kernels): True, the default, runs the
    state recurrence again in the backward pass; False keeps the forward's chunk states for it instead,
    B * H * (T / L) * Dqk * Dv elements in the dtype of q held from forward to backward (256 MiB at TFLA
    Fig. 4's 8 x 8192, 16 x 128/256, L = 256, bf16), for a forward + backward 7-13 % faster at head dims of
    128 and more, and from 0.3 % slower to 9 % faster at 64/64 (results/{h100,h200}/ab-keep-states).
    fused_chunk's forward keeps no states: its backward recomputes them whatever this says; parallel and
    recurrent have no chunk states.
    """
    options = dict(
        variant=variant,
        normalize=normalize,
        eps=eps,
        initial_state=initial_state,
        return_final_state=return_final_state,
    )
    validate_inputs(q, k, v, i, f, algorithm=algorithm, chunk_size=chunk_size,
                    recompute_states_in_bw=recompute_states_in_bw, **options)
    if algorithm == "auto" or (algorithm in CHUNKED_ALGORITHMS and chunk_size is None):
        from tflabench.kernels.mlstm.choice import choose_for_call

        picked = choose_for_call(q, v, variant=variant, algorithm=algorithm, chunk_size=chunk_size,
                                 training=_needs_backward(q, k, v, i, f, initial_state))
        algorithm, chunk_size = picked.algorithm, picked.chunk_size
    if algorithm == "parallel":
        return reference.mlstm_parallel(
            q, k, v, i, f, variant=variant, normalize=normalize, eps=eps, detach_normalizer=True
        )
    if algorithm == "recurrent":
        return reference.mlstm_recurrent(q, k, v, i, f, **options, detach_normalizer=True)
    if algorithm in ("xl_chunk", "limit_chunk"):
        options["recompute_states_in_bw"] = recompute_states_in_bw
    return triton_launcher(algorithm)(q, k, v, i, f, chunk_size=chunk_size, **options)


def triton_launcher(algorithm: str):
    """The launcher of a chunked algorithm (importing it imports Triton)."""
    if algorithm == "fused_chunk":
        from tflabench.kernels.mlstm.fused_chunk import mlstm_fused_chunk

        return mlstm_fused_chunk
    from tflabench.kernels.mlstm.xl_chunk import mlstm_limit_chunk, mlstm_xl_chunk

    return mlstm_xl_chunk if algorithm == "xl_chunk" else mlstm_limit_chunk


def _needs_backward(*tensors) -> bool:
    """Whether autograd records this call, so a backward pass may follow (the choice then weighs it)."""
    leaves = [t for t in tensors if isinstance(t, Tensor)]
    if isinstance(tensors[-1], (tuple, list)):
        leaves += [t for t in tensors[-1] if isinstance(t, Tensor)]
    return torch.is_grad_enabled() and any(t.requires_grad for t in leaves)


def validate_inputs(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    i: Tensor,
    f: Tensor,
    *,
    variant: str,
    algorithm: str,
    chunk_size: int,
    normalize: bool | None,
    eps: float,
    initial_state: InitialState | None,
    return_final_state: bool,
    recompute_states_in_bw: bool = True,
) -> None:
    """Raise InputError naming the first problem with the arguments of `mlstm`; see the module docstring."""
    _check_options(variant, algorithm, normalize, eps, initial_state, return_final_state,
                   recompute_states_in_bw)
    _check_shapes(q, k, v, i, f)
    _check_dtypes_and_devices(q, k, v, i, f)
    if chunk_size is not None and algorithm in ("auto", *CHUNKED_ALGORITHMS):
        _check_chunk_size(chunk_size, seq_len=q.shape[1], algorithm=algorithm)
    if initial_state is not None:
        _check_initial_state(initial_state, q, v)


def _check_options(
    variant: str,
    algorithm: str,
    normalize: bool | None,
    eps: float,
    initial_state: InitialState | None,
    return_final_state: bool,
    recompute_states_in_bw: bool,
) -> None:
    if variant not in VARIANTS:
        raise InputError(f"unknown variant {variant!r}: expected one of {', '.join(VARIANTS)}")
    if algorithm not in ALGORITHMS:
        raise InputError(f"unknown algorithm {algorithm!r}: expected one of {', '.join(ALGORITHMS)}")
    if normalize not in (None, True, False):
        raise InputError(f"normalize must be None, True or False, got {normalize!r}")
    if variant == "exp" and normalize is False:
        raise InputError("normalize=False is not supported with variant 'exp' (mLSTMexp always normalizes)")
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not math.isfinite(eps) or eps < 0:
        raise InputError(f"eps must be a finite number >= 0, got {eps!r}")
    if not isinstance(recompute_states_in_bw, bool):
        raise InputError(f"recompute_states_in_bw must be True or False, got {recompute_states_in_bw!r}")
    if algorithm == "parallel" and (initial_state is not None or return_final_state):
        raise InputError(
            "algorithm 'parallel' has no states: initial_state and return_final_state need another algorithm"
        )


def _check_shapes(q: Tensor, k: Tensor, v: Tensor, i: Tensor, f: Tensor) -> None:
    for name, tensor, rank, layout in (
        ("q", q, 4, "[B, T, H, Dqk]"),
        ("k", k, 4, "[B, T, H, Dqk]"),
        ("v", v, 4, "[B, T, H, Dv]"),
        ("i", i, 3, "[B, T, H]"),
        ("f", f, 3, "[B, T, H]"),
    ):
        if not isinstance(tensor, Tensor):
            raise InputError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
        if tensor.dim() != rank:
            raise InputError(f"{name} must have rank {rank} {layout}, got shape {tuple(tensor.shape)}")
    batch, seq_len, heads, head_dim_qk = q.shape
    if min(batch, seq_len, heads) < 1:
        raise InputError(f"B, T and H must be >= 1, got q of shape {tuple(q.shape)}")
    for name, tensor in (("k", k), ("v", v), ("i", i), ("f", f)):
        if tuple(tensor.shape[:3]) != (batch, seq_len, heads):
            raise InputError(
                f"mismatched B, T, H: q has {(batch, seq_len, heads)}, {name} has "
                f"{tuple(tensor.shape[:3])} (shapes q {tuple(q.shape)}, {name} {tuple(tensor.shape)})"
            )
    if k.shape[3] != head_dim_qk:
        raise InputError(f"q and k must have the same head dim Dqk, got {head_dim_qk} and {k.shape[3]}")
    for name, dim in (("Dqk", head_dim_qk), ("Dv", v.shape[3])):
        if not (MIN_HEAD_DIM <= dim <= MAX_HEAD_DIM and dim % HEAD_DIM_MULTIPLE == 0):
            raise InputError(
                f"unsupported head dim {name}={dim}: head dims must be multiples of "
                f"{HEAD_DIM_MULTIPLE} from {MIN_HEAD_DIM} to {MAX_HEAD_DIM}"
            )


def _check_dtypes_and_devices(q: Tensor, k: Tensor, v: Tensor, i: Tensor, f: Tensor) -> None:
    named = (("q", q), ("k", k), ("v", v), ("i", i), ("f", f))
    for name, tensor in named:
        if tensor.dtype not in DTYPES:
            raise InputError(
                f"unsupported dtype {tensor.dtype} of {name}: expected bfloat16, float16, float32 or float64"
            )
    if not q.dtype == k.dtype == v.dtype:
        raise InputError(f"q, k and v must have the same dtype, got {q.dtype}, {k.dtype} and {v.dtype}")
    _check_same_device(named)


def _check_same_device(named: tuple[tuple[str, Tensor], ...]) -> None:
    first_name, first = named[0]
    for name, tensor in named[1:]:
        if tensor.device != first.device:
            raise InputError(
                f"all tensors must be on one device: {first_name} is on {first.device}, "
                f"{name} on {tensor.device}"
            )


def _check_chunk_size(chunk_size: int, seq_len: int, algorithm: str) -> None:
    is_int = isinstance(chunk_size, int) and not isinstance(chunk_size, bool)
    if not is_int or chunk_size < MIN_CHUNK_SIZE or chunk_size & (chunk_size - 1):
        raise InputError(f"chunk_size must be a power of two >= {MIN_CHUNK_SIZE}, got {chunk_size!r}")
    if seq_len % chunk_size:
        raise InputError(f"sequence length T={seq_len} is not divisible by chunk_size={chunk_size}")
    if chunk_size > ONE_TILE_CHUNK_MAX.get(algorithm, chunk_size):
        raise InputError(f"{algorithm} supports chunk_size <= {ONE_TILE_CHUNK_MAX[algorithm]} (a chunk is "
                         f"one SRAM tile), got {chunk_size}")


def _check_initial_state(initial_state: InitialState, q: Tensor, v: Tensor) -> None:
    if not isinstance(initial_state, (tuple, list)) or len(initial_state) != 3:
        raise InputError("initial_state must be a tuple (C, n, m); n and m may be None")
    batch, _, heads, head_dim_qk = q.shape
    expected = {
        "C": (batch, heads, head_dim_qk, v.shape[3]),
        "n": (batch, heads, head_dim_qk),
        "m": (batch, heads),
    }
    named = [("q", q)]
    for (name, shape), tensor in zip(expected.items(), initial_state, strict=True):
        if tensor is None:
            continue
        label = f"initial_state {name}"
        if not isinstance(tensor, Tensor):
            raise InputError(f"{label} must be a torch.Tensor or None, got {type(tensor).__name__}")
        if tuple(tensor.shape) != shape:
            raise InputError(f"{label} must have shape {shape}, got {tuple(tensor.shape)}")
        if tensor.dtype not in DTYPES:
            raise InputError(f"unsupported dtype {tensor.dtype} of {label}")
        named.append((label, tensor))
    _check_same_device(tuple(named))

