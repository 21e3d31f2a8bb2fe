"""Accelerator database: datasheet peaks and measured (calibrated) ceilings.

Every entry keeps the dense (no 2:4 sparsity) peak FLOP/s per matmul dtype and the HBM bandwidth, with its
source. The paper's Table 18 values are used where they exist so that its numbers reproduce
(docs/reference/mlstm-math.md#hardware-table); ``a100-paper`` is the paper's A100 entry (1.935 TB/s, which is
really the A100 80 GB PCIe figure) and ``a100-sxm`` the physical A100 SXM4 80 GB (2.039 TB/s).

Measured ceilings (``tflabench calibrate``) are JSON files ``results/calibration/<gpu key>.json`` in the
repository (committed, so rooflines are reproducible); the directory can be moved with the environment
variable ``TFLABENCH_CALIBRATION_DIR``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from tflabench.errors import InputError

#: matmul dtypes every entry lists, in display order
PEAK_DTYPES = ("bfloat16", "float16", "tfloat32", "float32")

CALIBRATION_DIR_ENV = "TFLABENCH_CALIBRATION_DIR"
_DEFAULT_CALIBRATION_DIR = Path(__file__).resolve().parents[2] / "results" / "calibration"


@dataclass(frozen=True)
class GPU:
    """One accelerator: dense peak FLOP/s per dtype (keys `PEAK_DTYPES`) and HBM bandwidth in B/s."""

    key: str
    name: str
    year: int | None
    peak_flops: dict[str, float]
    bandwidth: float
    source: str


@dataclass(frozen=True)
class Ceilings:
    """Roofline ceilings: peak FLOP/s (alpha) and bandwidth in B/s (beta).

    source is ``"datasheet"`` or ``"measured <date> <device>"``.
    """

    flops: float
    bandwidth: float
    source: str

    @property
    def ridge(self) -> float:
        """Accelerator intensity I_acc = alpha / beta in FLOP/byte (the roofline's ridge point)."""
        return self.flops / self.bandwidth


def _peaks(bf16: float, fp16: float, tf32: float, fp32: float) -> dict[str, float]:
    return dict(zip(PEAK_DTYPES, (bf16, fp16, tf32, fp32), strict=True))


_DENSE = "dense = half the sparsity figures"

GPUS: dict[str, GPU] = {
    gpu.key: gpu
    for gpu in (
        GPU(
            "v100",
            "NVIDIA V100 SXM2",
            2017,
            _peaks(120e12, 125e12, 15.7e12, 15.7e12),
            0.9e12,
            "bf16 120e12 and 0.9 TB/s: TFLA paper Table 18 (V100 has no bf16 or tf32 tensor cores; the paper "
            "uses the fp16 tensor-core figure); fp16 125 TFLOP/s, fp32 15.7 TFLOP/s: NVIDIA V100 datasheet, "
            "tf32 listed as the fp32 rate",
        ),
        GPU(
            "a100-paper",
            "NVIDIA A100 (TFLA paper entry)",
            2020,
            _peaks(312e12, 312e12, 156e12, 19.5e12),
            1.935e12,
            "TFLA paper Table 18 (labelled A100 SXM, but 1.935 TB/s is the A100 80GB PCIe bandwidth); "
            f"tf32/fp32: NVIDIA A100 datasheet ({_DENSE})",
        ),
        GPU(
            "a100-sxm",
            "NVIDIA A100 SXM4 80GB",
            2020,
            _peaks(312e12, 312e12, 156e12, 19.5e12),
            2.039e12,
            f"NVIDIA A100 datasheet, SXM4 80GB ({_DENSE})",
        ),
        GPU(
            "a100-pcie",
            "NVIDIA A100 PCIe 80GB",
            2021,
            _peaks(312e12, 312e12, 156e12, 19.5e12),
            1.935e12,
            f"NVIDIA A100 datasheet, PCIe 80GB ({_DENSE})",
        ),
        GPU(
            "h100-sxm",
            "NVIDIA H100 SXM5 80GB",
            2022,
            _peaks(989e12, 989e12, 494.5e12, 67e12),
            3.35e12,
            "bf16/fp16 989e12 and 3.35 TB/s: TFLA paper Table 18; "
            f"tf32/fp32: NVIDIA H100 datasheet ({_DENSE})",
        ),
        GPU(
            "h100-pcie",
            "NVIDIA H100 PCIe 80GB",
            2022,
            _peaks(756.5e12, 756.5e12, 378e12, 51e12),
            2.0e12,
            f"NVIDIA H100 datasheet, PCIe 80GB ({_DENSE})",
        ),
        GPU(
            "h200",
            "NVIDIA H200 SXM 141GB",
            2024,
            _peaks(989e12, 989e12, 494.5e12, 67e12),
            4.8e12,
            f"NVIDIA H200 datasheet: H100 SXM compute with 4.8 TB/s HBM3e ({_DENSE})",
        ),
        GPU(
            "b200",
            "NVIDIA B200 (HGX)",
            2025,
            _peaks(2250e12, 2250e12, 1100e12, 80e12),
            7.7e12,
            "bf16 2250e12 and 7.7 TB/s: TFLA paper Table 18; "
            f"tf32/fp32: NVIDIA HGX B200 datasheet ({_DENSE})",
        ),
    )
}

#: short names; they pick the entries that reproduce the TFLA paper's numbers
ALIASES = {"h100": "h100-sxm", "a100": "a100-paper"}

# (substrings that must all occur, substrings that must not occur, key); torch.cuda.get_device_name() spelling
_DEVICE_NAME_RULES = (
    (("h200",), ("nvl", "gh200"), "h200"),
    (("h100", "pcie"), (), "h100-pcie"),
    (("h100",), ("nvl", "gh200", "pcie"), "h100-sxm"),
    (("a100", "pcie", "80gb"), (), "a100-pcie"),
    (("a100", "sxm", "80gb"), (), "a100-sxm"),
    (("v100", "sxm2"), (), "v100"),
    (("b200",), ("gb200",), "b200"),
)


def get_gpu(name: str) -> GPU:
    """The entry for a key or alias (case-insensitive); InputError listing the known names otherwise."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in GPUS:
        known = ", ".join([*GPUS, *ALIASES])
        raise InputError(f"unknown GPU {name!r} (known: {known})")
    return GPUS[key]


def gpu_from_device_name(torch_device_name: str) -> GPU | None:
    """The entry matching a `torch.cuda.get_device_name()` string, or None (e.g. H100 NVL, A100 40GB)."""
    lowered = torch_device_name.lower()
    for required, excluded, key in _DEVICE_NAME_RULES:
        if all(s in lowered for s in required) and not any(s in lowered for s in excluded):
            return GPUS[key]
    return None


def datasheet_ceilings(gpu: GPU, dtype: str = "bfloat16") -> Ceilings:
    """Datasheet ceilings of `gpu` for matmuls in `dtype` (one of `PEAK_DTYPES`)."""
    if dtype not in gpu.peak_flops:
        raise InputError(f"unknown dtype {dtype!r} (known: {', '.join(PEAK_DTYPES)})")
    return Ceilings(flops=gpu.peak_flops[dtype], bandwidth=gpu.bandwidth, source="datasheet")


def calibration_dir() -> Path:
    """Directory of the measured-ceilings files (env TFLABENCH_CALIBRATION_DIR overrides the default)."""
    override = os.environ.get(CALIBRATION_DIR_ENV)
    return Path(override) if override else _DEFAULT_CALIBRATION_DIR


def calibration_path(gpu_key: str) -> Path:
    """The file of a GPU's calibration (in `calibration_dir`)."""
    return calibration_dir() / f"{get_gpu(gpu_key).key}.json"


def read_calibration_file(path: Path) -> dict:
    """The parsed JSON of a calibration file (an input error where it is not JSON)."""
    try:
        return json.loads(path.read_text())
    except ValueError as exc:
        raise InputError(f"malformed calibration file {str(path)!r}: {exc!r}") from exc


def _calibration_record(gpu_key: str) -> tuple[Path, dict] | None:
    """(path, parsed JSON) of a GPU's calibration file, or None when it was never calibrated."""
    path = calibration_path(gpu_key)
    if not path.exists():
        return None
    return path, read_calibration_file(path)


def load_measured_ceilings(gpu_key: str) -> Ceilings | None:
    """The stored measured bf16 ceilings of a GPU, or None when it was never calibrated."""
    stored = _calibration_record(gpu_key)
    if stored is None:
        return None
    path, record = stored
    try:
        ceilings = Ceilings(float(record["flops"]), float(record["bandwidth"]), str(record["source"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"malformed calibration file {str(path)!r}: {exc!r}") from exc
    if not (ceilings.flops > 0 and ceilings.bandwidth > 0):
        raise InputError(f"malformed calibration file {str(path)!r}: ceilings must be positive")
    return ceilings


def load_calibration_blocks(gpu_key: str) -> dict | None:
    """The building-block figures of a GPU's calibration (``blocks``, see `analysis.calibrate_blocks`), or
    None when the GPU was never calibrated or only its matmul and copy ceilings were."""
    stored = _calibration_record(gpu_key)
    if stored is None or "blocks" not in stored[1]:
        return None
    path, record = stored
    if not isinstance(record["blocks"], dict):
        raise InputError(f"malformed calibration file {str(path)!r}: blocks must be an object")
    return record["blocks"]


def save_measured_ceilings(gpu_key: str, ceilings: Ceilings, blocks: dict | None = None,
                           provenance: dict | None = None) -> Path:
    """Store measured bf16 ceilings (and the building-block figures, when measured, and the provenance:
    commit, software versions, command, the GPU and its clocks) as JSON; returns the file written."""
    path = calibration_path(gpu_key)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "gpu": get_gpu(gpu_key).key,
        "dtype": "bfloat16",
        "flops": ceilings.flops,
        "bandwidth": ceilings.bandwidth,
        "source": ceilings.source,
    }
    if blocks is not None:
        record["blocks"] = blocks
    if provenance is not None:
        record["provenance"] = provenance
    path.write_text(json.dumps(record, indent=2) + "\n")
    return path
