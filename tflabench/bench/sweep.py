"""Sweep specification (CLI flags, TOML file or preset) and its expansion into (kernel, point) jobs.

A sweep is a grid over the shape axes (seq_len, batch or constant total tokens, heads or embedding dim,
head_dim_qk or the ratio Dqk/Dv, head_dim_v, chunk_size), dtypes and modes, applied to the kernels that
match its selectors. Per-family or per-kernel overrides change shape axes for some kernels only (the
paper's Fig. 4 runs attention at 32 x 128 and the mLSTM kernels at 16 x 256/128 on the same tokens).

Instead of the product of heads, head_dim_qk and head_dim_v, ``head_configs = [[32, 64, 64], [16, 128, 256]]``
lists (heads, head_dim_qk, head_dim_v) triples (the layer shapes of real models; preset ``tfla-grid``);
setting any of those axes in an override replaces them for the kernels it matches.

The TOML format (docs/sweep-toml.md; every list axis also accepts a single value, and integer axes a string
``"512..65536"`` meaning powers of two from 512 to 65536)::

    preset = "tfla-fig4"             # optional: start from a preset, then apply this file

    [sweep]
    kernels = ["tflabench.*", "softmax_attention"]   # name globs or family names
    seq_len = [512, 1024]
    tokens = 65536                   # constant total tokens (batch = tokens / seq_len) ... or batch = [8]
    embedding_dim = 4096             # heads = embedding_dim / head_dim_v ... or heads = [16]
    head_dim_v = [256]
    qk_ratio = 0.5                   # head_dim_qk = qk_ratio * head_dim_v ... or head_dim_qk = [128]
    chunk_size = [128]
    dtype = ["bfloat16"]
    mode = ["fwd", "fwdbw"]
    tilings = ["default", "out-q2"]  # tiling variants of the kernels with a tiling parameter

    [measure]
    warmup = 10                      # untimed iterations (compile and autotune happen here)
    repeats = 30                     # timed iterations (median and IQR)
    timeout = 300                    # seconds per point, warm-up included
    check_at = "small"               # the correctness gate's size: "small" or "full" (the timed point)

    [override.softmax_attention]     # a family name or a kernel-name glob; later tables win
    head_dim_v = 128
    qk_ratio = 1.0
"""

from __future__ import annotations

import fnmatch
import importlib
import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from tflabench import inputs
from tflabench.bench.registry import Availability, KernelSpec
from tflabench.core import DTYPES, FAMILIES, MODES, SweepPoint
from tflabench.errors import InputError

#: Axes of which exactly one of the pair is set; setting one clears the other.
_PARTNERS = {
    "batch": "tokens", "tokens": "batch",
    "heads": "embedding_dim", "embedding_dim": "heads",
    "head_dim_qk": "qk_ratio", "qk_ratio": "head_dim_qk",
}
_INT_LIST_AXES = ("seq_len", "batch", "heads", "head_dim_qk", "head_dim_v", "chunk_size")
_INT_AXES = ("tokens", "embedding_dim")
#: the axes that (heads, head_dim_qk, head_dim_v) triples in ``head_configs`` replace
_HEAD_AXES = ("heads", "embedding_dim", "head_dim_qk", "qk_ratio", "head_dim_v")
_SWEEP_KEYS = ("kernels", *_INT_LIST_AXES, *_INT_AXES, "qk_ratio", "head_configs", "dtype", "mode",
               "tilings")
_MEASURE_KEYS = ("warmup", "repeats", "timeout", "check_at")
#: the tiling text of the kernels' own tiling (a point's tiling None)
DEFAULT_TILING = "default"
#: sizes of the correctness gate (`tflabench.bench.measure.ReferenceGate`)
CHECK_SIZES = ("small", "full")
_TOP_KEYS = ("preset", "sweep", "measure", "override")

#: Names a key in error messages (TOML location or command-line option).
Label = Callable[[str], str]


@dataclass(frozen=True)
class Shape:
    """Shape axes of a sweep. Of each pair (batch, tokens), (heads, embedding_dim), (head_dim_qk, qk_ratio)
    exactly one is set."""

    seq_len: tuple[int, ...] = (8192,)
    batch: tuple[int, ...] | None = None
    tokens: int | None = 65536
    heads: tuple[int, ...] | None = None
    embedding_dim: int | None = 4096
    head_dim_qk: tuple[int, ...] | None = None
    qk_ratio: float | None = 0.5
    head_dim_v: tuple[int, ...] = (256,)
    chunk_size: tuple[int, ...] = (128,)
    head_configs: tuple[tuple[int, int, int], ...] | None = None

    def with_values(self, values: Mapping[str, Any]) -> Shape:
        """Set the given axes (validated by `parse_shape_values`); each one clears its partner axis, and
        any head axis clears ``head_configs``."""
        cleared = {_PARTNERS[name]: None for name in values if name in _PARTNERS}
        if any(name in _HEAD_AXES for name in values):
            cleared["head_configs"] = None
        return replace(self, **(cleared | dict(values)))


_SHAPE_KEYS = tuple(axis.name for axis in fields(Shape))


@dataclass(frozen=True)
class SweepSpec:
    """A whole sweep: kernel selectors, shape grid, per-kernel overrides and measurement settings.

    tilings: the tiling variants of the kernels with a tiling parameter (None: the kernel's own tiling);
    check_at: the size of the correctness gate, one of `CHECK_SIZES`."""

    kernels: tuple[str, ...] = ("*",)
    shape: Shape = field(default_factory=Shape)
    dtypes: tuple[str, ...] = ("bfloat16",)
    modes: tuple[str, ...] = MODES
    tilings: tuple[str | None, ...] = (None,)
    overrides: tuple[tuple[str, Mapping[str, Any]], ...] = ()
    warmup: int = 10
    repeats: int = 30
    timeout_s: float = 300.0
    check_at: str = "small"

    def shape_for(self, kernel: KernelSpec) -> Shape:
        """The shape grid for one kernel: the base shape with every matching override applied in order."""
        shape = self.shape
        for selector, values in self.overrides:
            if selector_matches(selector, kernel):
                shape = shape.with_values(values)
        return shape


@dataclass(frozen=True)
class Job:
    """One (kernel, point). status None means "to be measured"; otherwise the row is already decided
    (skipped / unavailable / error) and reason says why. version: the kernel package's version."""

    kernel: KernelSpec
    point: SweepPoint
    status: str | None = None
    reason: str = ""
    version: str | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.kernel.name, self.point.key())


# ----------------------------------------------------------------------------------------------- parsing


def parse_int_list(value: Any, where: str) -> tuple[int, ...]:
    """A positive int, a list of them, or a string "512,1024" / "512..65536" (powers of two)."""
    if isinstance(value, str):
        return _parse_int_text(value, where)
    items = value if isinstance(value, list) else [value]
    if not items:
        raise InputError(f"{where} must not be empty")
    return tuple(_positive_int(item, where) for item in items)


def _parse_int_text(text: str, where: str) -> tuple[int, ...]:
    values: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if ".." in part:
            low, _, high = part.partition("..")
            values.extend(_doubling_range(_int_from_text(low, where), _int_from_text(high, where), where))
        else:
            values.append(_int_from_text(part, where))
    return tuple(values)


def _int_from_text(text: str, where: str) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise InputError(f"{where}: expected integers like 512,1024 or 512..65536, got {text!r}") from None
    return _positive_int(value, where)


def _doubling_range(low: int, high: int, where: str) -> list[int]:
    if high < low:
        raise InputError(f"{where}: empty range {low}..{high}")
    values = [low]
    while values[-1] * 2 <= high:
        values.append(values[-1] * 2)
    return values


def _positive_int(value: Any, where: str) -> int:
    return inputs.positive_int(value, where)


def _positive_float(value: Any, where: str) -> float:
    return inputs.finite_number(value, where)


def parse_names(value: Any, where: str, allowed: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """A string, a comma-separated string or a list of strings; each in ``allowed`` if given."""
    items = value.split(",") if isinstance(value, str) else value if isinstance(value, list) else [value]
    names = tuple(item.strip() if isinstance(item, str) else item for item in items)
    if not names or any(not isinstance(name, str) or not name for name in names):
        raise InputError(f"{where} must be a non-empty string or list of strings, got {value!r}")
    for name in names:
        if allowed is not None and name not in allowed:
            raise InputError(f"{where}: unknown value {name!r} (known: {', '.join(allowed)})")
    return tuple(dict.fromkeys(names))


def toml_label(section: str) -> Label:
    """Names keys in error messages as ``<file> [section] key``."""
    return lambda key: f"{section} {key}"


#: command-line options not named after their key
_OPTION_NAMES = {"tilings": "--tiling"}


def option_label(key: str) -> str:
    """Names keys in error messages as command-line options (``--seq-len``)."""
    return _OPTION_NAMES.get(key, "--" + key.replace("_", "-"))


def parse_shape_values(table: Mapping[str, Any], label: Label) -> dict[str, Any]:
    """Validate the shape axes present in a table (TOML section or CLI flags); returns them typed."""
    values: dict[str, Any] = {}
    for name in _INT_LIST_AXES:
        if name in table:
            values[name] = parse_int_list(table[name], label(name))
    for name in _INT_AXES:
        if name in table:
            values[name] = _positive_int(table[name], label(name))
    if "qk_ratio" in table:
        values["qk_ratio"] = _positive_float(table["qk_ratio"], label("qk_ratio"))
    if "head_configs" in table:
        values["head_configs"] = _parse_head_configs(table["head_configs"], label("head_configs"))
    for name, partner in _PARTNERS.items():
        if name in values and partner in values:
            raise InputError(f"give either {label(name)} or {label(partner)}, not both")
    return values


def _parse_head_configs(value: Any, where: str) -> tuple[tuple[int, int, int], ...]:
    """A non-empty list of [heads, head_dim_qk, head_dim_v] lists of positive integers."""
    triples = value if isinstance(value, list) else None
    if not triples or any(not isinstance(triple, list) or len(triple) != 3 for triple in triples):
        raise InputError(f"{where} must be a list of [heads, head_dim_qk, head_dim_v] triples, got {value!r}")
    return tuple(tuple(_positive_int(item, where) for item in triple) for triple in triples)


def apply_table(spec: SweepSpec, data: Mapping[str, Any], source: str) -> SweepSpec:
    """Apply a parsed TOML document (or preset) on top of ``spec``."""
    if not isinstance(data, Mapping):
        raise InputError(f"{source}: expected a table")
    _reject_unknown(data, _TOP_KEYS, source)
    if "preset" in data:
        if not isinstance(data["preset"], str):
            raise InputError(f"{source}: preset must be a string")
        spec = load_preset(data["preset"], spec)
    sweep = _section(data, "sweep", source)
    _reject_unknown(sweep, _SWEEP_KEYS, f"{source} [sweep]")
    spec = apply_sweep_values(spec, sweep, toml_label(f"{source} [sweep]"))
    measure = _section(data, "measure", source)
    _reject_unknown(measure, _MEASURE_KEYS, f"{source} [measure]")
    spec = apply_measure(spec, measure, toml_label(f"{source} [measure]"))
    overrides = _section(data, "override", source)
    return replace(spec, overrides=spec.overrides + _parse_overrides(overrides, source))


def apply_sweep_values(spec: SweepSpec, table: Mapping[str, Any], label: Label) -> SweepSpec:
    """Apply the axes of a [sweep] table (or the CLI flags) on top of ``spec``."""
    spec = replace(spec, shape=spec.shape.with_values(parse_shape_values(table, label)))
    if "kernels" in table:
        spec = replace(spec, kernels=parse_names(table["kernels"], label("kernels")))
    if "dtype" in table:
        spec = replace(spec, dtypes=parse_names(table["dtype"], label("dtype"), DTYPES))
    if "mode" in table:
        spec = replace(spec, modes=parse_names(table["mode"], label("mode"), MODES))
    if "tilings" in table:
        spec = replace(spec, tilings=parse_tilings(table["tilings"], label("tilings")))
    return spec


def parse_tilings(value: Any, where: str) -> tuple[str | None, ...]:
    """A list of tiling texts (a name, `DEFAULT_TILING`, or ``FIELD=VALUE,...``), whitespace removed;
    the default becomes None. Names and fields are checked against the kernels when the sweep expands."""
    items = value if isinstance(value, list) else [value]
    if not items or any(not isinstance(item, str) or not item.strip() for item in items):
        raise InputError(f"{where} must be a non-empty list of tiling names or FIELD=VALUE,... overrides, "
                         f"got {value!r}")
    texts = ("".join(item.split()) for item in items)
    return tuple(dict.fromkeys(None if text == DEFAULT_TILING else text for text in texts))

def apply_measure(spec: SweepSpec, table: Mapping[str, Any], label: Label) -> SweepSpec:
    """Apply warmup / repeats / timeout / check_at (from a [measure] table or CLI flags)."""
    if "warmup" in table:
        spec = replace(spec, warmup=inputs.non_negative_int(table["warmup"], label("warmup")))
    if "repeats" in table:
        spec = replace(spec, repeats=_positive_int(table["repeats"], label("repeats")))
    if "timeout" in table:
        spec = replace(spec, timeout_s=_positive_float(table["timeout"], label("timeout")))
    if "check_at" in table:
        spec = replace(spec, check_at=_check_size(table["check_at"], label("check_at")))
    return spec


def _check_size(value: Any, where: str) -> str:
    if value not in CHECK_SIZES:
        raise InputError(f"{where} must be one of {', '.join(CHECK_SIZES)}, got {value!r}")
    return value


def _parse_overrides(table: Mapping[str, Any], source: str) -> tuple[tuple[str, Mapping[str, Any]], ...]:
    overrides = []
    for selector, values in table.items():
        where = f"{source} [override.{selector!r}]"
        if not isinstance(values, Mapping):
            raise InputError(f"{where}: expected a table")
        _reject_unknown(values, _SHAPE_KEYS, where)
        overrides.append((selector, parse_shape_values(values, toml_label(where))))
    return tuple(overrides)


def _section(data: Mapping[str, Any], name: str, source: str) -> Mapping[str, Any]:
    section = data.get(name, {})
    if not isinstance(section, Mapping):
        raise InputError(f"{source}: {name} must be a table ([{name}])")
    return section


def _reject_unknown(table: Mapping[str, Any], known: tuple[str, ...], where: str) -> None:
    for key in table:
        if key not in known:
            raise InputError(f"{where}: unknown key {key!r} (known: {', '.join(known)})")


def _toml_loads(text: str, source: str) -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        try:
            import tomli as tomllib
        except ModuleNotFoundError:
            raise InputError("reading TOML needs Python >= 3.11 or the tomli package") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{source}: invalid TOML: {exc}") from None


def load_sweep_file(path: str | Path, base: SweepSpec | None = None) -> SweepSpec:
    """Read a sweep TOML file on top of ``base`` (default: the built-in defaults)."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8")
    except OSError as exc:
        raise InputError(f"cannot read sweep file {str(path)!r}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path.name}: not a UTF-8 text file") from None
    return apply_table(base or SweepSpec(), _toml_loads(text, path.name), path.name)


# ----------------------------------------------------------------------------------------------- presets

#: Directory of the preset sweep files shipped with the package (``<name>.toml``, the sweep-file format):
#: the paper's experiments (docs/reference/paper-numbers.md#benchmark-configurations) and ``tiny``.
PRESET_DIR = Path(__file__).parent / "presets"
PRESETS = tuple(sorted(path.stem for path in PRESET_DIR.glob("*.toml")))


def load_preset(name: str, base: SweepSpec | None = None) -> SweepSpec:
    if name not in PRESETS:
        raise InputError(f"unknown preset {name!r} (known: {', '.join(PRESETS)})")
    text = (PRESET_DIR / f"{name}.toml").read_text(encoding="utf-8")
    return apply_table(base or SweepSpec(), _toml_loads(text, f"preset {name}"), f"preset {name}")


# ----------------------------------------------------------------------------------------------- kernels


def import_kernel_modules(modules: tuple[str, ...]) -> None:
    """Import extra modules that register kernels (your own kernels, test doubles)."""
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError as exc:
            raise InputError(f"cannot import kernel module {module!r}: {exc}") from None


def selector_matches(selector: str, kernel: KernelSpec) -> bool:
    """A selector is a family name (one of registry.FAMILIES) or a glob on the kernel name."""
    if selector in FAMILIES:
        return kernel.family == selector
    return fnmatch.fnmatchcase(kernel.name, selector)


#: the suite's own kernels run first among kernels of equal first-call time: a run cut short by a
#: command's time limit always holds the kernels it exists to measure
OWN_KERNELS = "tflabench.*"


def select_kernels(selectors: tuple[str, ...], kernels: Mapping[str, KernelSpec]) -> list[KernelSpec]:
    """Kernels matching any selector, fastest first-call first, then our own before the peers, then by
    name; a selector matching nothing is an error."""
    for selector in selectors:
        if not any(selector_matches(selector, kernel) for kernel in kernels.values()):
            raise InputError(f"no kernel matches {selector!r} (see `tflabench kernels`)")
    selected = [kernel for kernel in kernels.values()
                if any(selector_matches(selector, kernel) for selector in selectors)]
    return sorted(selected, key=lambda kernel: (
        kernel.first_call_s, not fnmatch.fnmatchcase(kernel.name, OWN_KERNELS), kernel.name))


# ----------------------------------------------------------------------------------------------- expansion


def expand(spec: SweepSpec, kernels: Mapping[str, KernelSpec]) -> list[Job]:
    """All (kernel, point) jobs of the sweep, grouped by kernel. Invalid combinations are kept as jobs
    with status skipped / unavailable and the reason, never dropped."""
    jobs: list[Job] = []
    selected = select_kernels(spec.kernels, kernels)
    if spec.tilings != (None,) and not any(kernel.uses_tiling for kernel in selected):
        raise InputError("tilings apply to kernels with a tiling parameter (tflabench.*.xl_chunk and "
                         "tflabench.*.fused_chunk); no selected kernel has one")
    for kernel in selected:
        availability = _availability(kernel)
        for point in kernel_points(spec.shape_for(kernel), spec.dtypes, spec.modes, kernel, spec.tilings):
            status, reason = _precheck(kernel, availability, point)
            jobs.append(Job(kernel, point, status, reason, availability.version))
    return jobs


def same_tilings(jobs: list[Job]) -> list[str]:
    """One line per kernel and pair of the sweep's tilings that run the same kernels at some of its points
    (`KernelSpec.resolved_tiling`): an A/B whose override is what a default already is measures one tiling
    twice. Points the kernel skips, and tilings that do not fit a point, are left out; a kernel unavailable
    on this machine (no GPU for a dry run) is compared all the same."""
    resolved: dict[tuple, list[tuple[str, Any]]] = {}
    same: dict[tuple[str, str, str], list[SweepPoint]] = {}
    for job in jobs:
        if job.kernel.resolved_tiling is None or job.status not in (None, "unavailable"):
            continue
        try:
            tiling = job.kernel.resolved_tiling(job.point)
        except InputError:
            continue
        seen = resolved.setdefault((job.kernel.name, replace(job.point, tiling=None)), [])
        text = job.point.tiling or DEFAULT_TILING
        for other_text, other in seen:
            if other == tiling:
                same.setdefault((job.kernel.name, other_text, text), []).append(job.point)
                break
        seen.append((text, tiling))
    return [f"{kernel}: tilings {first!r} and {second!r} run the same kernels at {len(points)} point(s), "
            f"e.g. {points[0].key()}" for (kernel, first, second), points in same.items()]


def kernel_points(shape: Shape, dtypes: tuple[str, ...], modes: tuple[str, ...], kernel: KernelSpec,
                  tilings: tuple[str | None, ...] = (None,)) -> list[SweepPoint]:
    """The grid of points for one kernel (chunk_size None for kernels without a chunk parameter, tiling
    None for kernels without a tiling parameter)."""
    chunks = shape.chunk_size if kernel.uses_chunk_size else (None,)
    tilings = tilings if kernel.uses_tiling else (None,)
    points = []
    for dtype, seq_len, head_dim_v in itertools.product(dtypes, shape.seq_len, shape.head_dim_v):
        grid = itertools.product(_batches(shape, seq_len, kernel), _head_triples(shape, head_dim_v, kernel),
                                 chunks, tilings, modes)
        points += [SweepPoint(batch, seq_len, heads, head_dim_qk, dim_v, chunk, dtype, mode, tiling)
                   for batch, (heads, head_dim_qk, dim_v), chunk, tiling, mode in grid]
    return list(dict.fromkeys(points))


def _head_triples(shape: Shape, head_dim_v: int, kernel: KernelSpec) -> list[tuple[int, int, int]]:
    """(heads, head_dim_qk, head_dim_v) of the points: ``head_configs`` if set, else the product of the
    head axes at this head_dim_v."""
    if shape.head_configs is not None:
        return list(shape.head_configs)
    return [(heads, head_dim_qk, head_dim_v) for heads, head_dim_qk in itertools.product(
        _heads(shape, head_dim_v, kernel), _head_dims_qk(shape, head_dim_v, kernel))]


def _quotient(total: int, total_name: str, part: int, part_name: str, kernel: KernelSpec) -> tuple[int]:
    """(total // part,) for a shape given as a total (tokens, embedding dim) and the point's part of it."""
    if total % part:
        raise InputError(f"{total_name} {total} is not a multiple of {part_name} {part} "
                         f"(kernel {kernel.name})")
    return (total // part,)


def _batches(shape: Shape, seq_len: int, kernel: KernelSpec) -> tuple[int, ...]:
    if shape.tokens is None:
        return shape.batch
    return _quotient(shape.tokens, "tokens", seq_len, "seq_len", kernel)


def _heads(shape: Shape, head_dim_v: int, kernel: KernelSpec) -> tuple[int, ...]:
    if shape.embedding_dim is None:
        return shape.heads
    return _quotient(shape.embedding_dim, "embedding_dim", head_dim_v, "head_dim_v", kernel)


def _head_dims_qk(shape: Shape, head_dim_v: int, kernel: KernelSpec) -> tuple[int, ...]:
    if shape.qk_ratio is None:
        return shape.head_dim_qk
    head_dim_qk = shape.qk_ratio * head_dim_v
    if head_dim_qk != int(head_dim_qk) or head_dim_qk < 1:
        raise InputError(f"qk_ratio {shape.qk_ratio} x head_dim_v {head_dim_v} is not a positive integer "
                         f"(kernel {kernel.name})")
    return (int(head_dim_qk),)


def _availability(kernel: KernelSpec) -> Availability:
    try:
        return kernel.availability()
    except Exception as exc:  # a broken adapter must not stop the sweep
        return Availability(False, f"availability check raised {type(exc).__name__}: {exc}")


def _precheck(kernel: KernelSpec, availability: Availability, point: SweepPoint) -> tuple[str | None, str]:
    """Decide without running whether a point is unavailable / skipped; (None, "") means run it."""
    if not availability.available:
        return "unavailable", availability.reason
    if point.mode not in kernel.modes:
        return "unavailable", kernel.mode_reasons.get(point.mode, f"mode {point.mode} not supported")
    chunk = point.chunk_size
    if chunk is not None and chunk > point.seq_len:
        return "skipped", f"chunk size {chunk} is larger than seq_len {point.seq_len}"
    if chunk is not None and point.seq_len % chunk:
        return "skipped", f"seq_len {point.seq_len} is not a multiple of chunk size {chunk}"
    try:
        reason = kernel.unsupported(point)
    except InputError:  # an invalid sweep input (an unknown tiling): the command stops
        raise
    except Exception as exc:
        return "error", f"unsupported() raised {type(exc).__name__}: {exc}"
    return ("skipped", reason) if reason else (None, "")
