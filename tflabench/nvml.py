"""GPU clocks, temperature and power through NVML (package nvidia-ml-py, module `pynvml`).

Everything here degrades to "no data": without the library, without a driver (NVMLError_LibraryNotFound)
or without a GPU, the sampler records no samples and `device_info` returns an empty dict.
"""

from __future__ import annotations

import os
import statistics
import threading
from typing import Any

#: Seconds between samples; a point's timed loop often lasts only ~0.1 s.
SAMPLE_INTERVAL_S = 0.01


def _nvml():
    """The initialised pynvml module, or None when NVML is not usable here."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # ImportError, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
        return None
    return pynvml


def _visible_index() -> int:
    """NVML index of CUDA device 0 of this process (first entry of CUDA_VISIBLE_DEVICES if numeric)."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
    return int(first) if first.isdigit() else 0


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def device_info() -> dict[str, str]:
    """Name, driver and CUDA driver version of this process's GPU, and its serial number and UUID where
    NVML gives them (which physical GPU measured); empty without NVML or GPU."""
    pynvml = _nvml()
    if pynvml is None:
        return {}
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(_visible_index())
        cuda = pynvml.nvmlSystemGetCudaDriverVersion()
        info = {
            "name": _text(pynvml.nvmlDeviceGetName(handle)),
            "driver": _text(pynvml.nvmlSystemGetDriverVersion()),
            "cuda_driver": f"{cuda // 1000}.{cuda % 1000 // 10}",
        }
        for key, query in (("serial", pynvml.nvmlDeviceGetSerial), ("uuid", pynvml.nvmlDeviceGetUUID)):
            try:
                info[key] = _text(query(handle))
            except Exception:  # not reported on every board
                continue
        return info
    except Exception:
        return {}
    finally:
        pynvml.nvmlShutdown()


class NvmlSampler:
    """Samples SM / memory clocks (MHz), temperature (C) and power (W) in a background thread.

    Use as a context manager around the timed part of a point, then read `summary()`:
    median clocks and power, maximum temperature; None for every field when nothing was sampled.
    """

    def __init__(self, interval_s: float = SAMPLE_INTERVAL_S) -> None:
        self._interval_s = interval_s
        self._samples: list[tuple[float, float, float, float]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._pynvml = None
        self._handle = None

    def __enter__(self) -> NvmlSampler:
        self._pynvml = _nvml()
        if self._pynvml is not None:
            try:
                self._handle = self._pynvml.nvmlDeviceGetHandleByIndex(_visible_index())
            except Exception:
                self._handle = None
        if self._handle is not None:
            self._sample()
            self._thread = threading.Thread(target=self._loop, name="nvml-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc_info) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._sample()
        if self._pynvml is not None:
            self._pynvml.nvmlShutdown()

    def _loop(self) -> None:
        while not self._stop.wait(self._interval_s):
            self._sample()

    def _sample(self) -> None:
        pynvml, handle = self._pynvml, self._handle
        try:
            self._samples.append((
                pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
                pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
                pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
                pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            ))
        except Exception:  # a sensor that is not supported on this GPU: skip the sample
            return

    def summary(self) -> dict[str, float | None]:
        """Columns sm_clock_mhz, mem_clock_mhz, temp_c_max, power_w of the results table."""
        if not self._samples:
            return {"sm_clock_mhz": None, "mem_clock_mhz": None, "temp_c_max": None, "power_w": None}
        sm, mem, temp, power = zip(*self._samples, strict=True)
        return {
            "sm_clock_mhz": statistics.median(sm),
            "mem_clock_mhz": statistics.median(mem),
            "temp_c_max": max(temp),
            "power_w": round(statistics.median(power), 1),
        }
