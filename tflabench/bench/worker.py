"""Process isolation: the points of one kernel are measured in a worker process with a time limit.

A compiler abort (SIGABRT), an illegal memory access, an out-of-memory error or a timeout becomes the
status of the point that was running (crash / oom / timeout) and the sweep goes on with a fresh worker
for the kernel's next point; the point that broke the worker is not retried.

Protocol: the parent starts ``python -m tflabench.bench.worker --kernel NAME ...`` and writes one JSON
line per point (the SweepPoint's fields) to its stdin; the worker answers one JSON line per point (the
measured columns, see `measure.measure_point`) on the original stdout, after redirecting file
descriptor 1 to stderr so that prints of kernels and compilers cannot corrupt the protocol. The
worker's stderr goes to a log file.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tflabench.core import SweepPoint

#: Seconds a worker may take to import torch, the adapters and the kernel before its first point.
STARTUP_TIMEOUT_S = 120.0
#: Markers of CUDA errors after which the process's CUDA context is unusable.
_FATAL_CUDA_MARKERS = ("illegal memory access", "CUDA error", "unspecified launch failure",
                       "misaligned address", "device-side assert")
_MESSAGE_CHARS = 500
#: Starts the line the worker writes to its log before each point.
POINT_HEADER = "== point "


def one_line(text: str, limit: int = _MESSAGE_CHARS) -> str:
    """Collapse whitespace (the CSV keeps one row per line) and truncate."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def classify_failure(exc: BaseException) -> tuple[str, bool]:
    """(status, fatal) of an exception raised while measuring; fatal means the worker must exit."""
    text = f"{type(exc).__name__}: {exc}"
    if type(exc).__name__ == "OutOfMemoryError" or "out of memory" in text.lower():
        return "oom", False
    if any(marker in text for marker in _FATAL_CUDA_MARKERS):
        return "crash", True
    return "error", False


# ------------------------------------------------------------------------------------------- worker side


def _protocol_stream():
    """A text stream on the original stdout; fd 1 (print, C code) is redirected to stderr."""
    protocol_fd = os.dup(1)
    os.dup2(2, 1)
    return os.fdopen(protocol_fd, "w", buffering=1)


def _exit_with_parent() -> None:
    """Exit when the parent dies (a killed sweep must not leave a hanging worker behind)."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def serve(kernel_name: str, device: str, modules: tuple[str, ...], warmup: int, repeats: int,
          check_at: str = "small") -> int:
    """Worker main loop: measure each point read from stdin, answer on the protocol stream (the gate of
    size ``check_at``, `measure.ReferenceGate`)."""
    protocol = _protocol_stream()
    _exit_with_parent()
    if device == "cpu-interpreter":
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from tflabench.bench.measure import MeasureSettings, ReferenceGate, measure_point
    from tflabench.bench.registry import get_kernel
    from tflabench.bench.sweep import import_kernel_modules

    import_kernel_modules(modules)
    spec = get_kernel(kernel_name)
    gate = ReferenceGate(device, check_at)
    settings = MeasureSettings(warmup=warmup, repeats=repeats)
    protocol.write(json.dumps({"event": "ready"}) + "\n")
    for line in sys.stdin:
        point = SweepPoint(**json.loads(line))
        print(f"{POINT_HEADER}{kernel_name} {point.key()}", file=sys.stderr, flush=True)
        try:
            result = measure_point(spec, point, device, settings, gate)
            fatal = False
        except Exception as exc:
            traceback.print_exc()
            status, fatal = classify_failure(exc)
            result = {"status": status, "reason": one_line(f"{type(exc).__name__}: {exc}")}
        if result["status"] in ("oom", "error"):
            _release_memory(device)
        protocol.write(json.dumps(result) + "\n")
        if fatal:
            return 1
    return 0


def _release_memory(device: str) -> None:
    """Return the failed point's memory (its frames are gone once the exception is) to the device."""
    gc.collect()
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


# ------------------------------------------------------------------------------------------- parent side


class WorkerStartError(RuntimeError):
    """The worker died or hung before it could measure anything (bad module, unknown kernel, ...)."""

    def __init__(self, status: str, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _worker_environment(overrides: dict[str, str] | None = None) -> dict[str, str]:
    """The parent's environment with its import path, so the worker finds the same kernel modules, and
    ``overrides`` (a sweep lane's CUDA_VISIBLE_DEVICES)."""
    env = dict(os.environ, **(overrides or {}))
    paths = [path for path in sys.path if path]
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


class KernelWorker:
    """Parent-side handle of one worker process measuring points of one kernel."""

    def __init__(self, kernel: str, device: str, modules: tuple[str, ...], warmup: int, repeats: int,
                 log_path: Path | None = None, env: dict[str, str] | None = None,
                 check_at: str = "small") -> None:
        command = [sys.executable, "-m", "tflabench.bench.worker", "--kernel", kernel, "--device", device,
                   "--warmup", str(warmup), "--repeats", str(repeats), "--check-at", check_at]
        for module in modules:
            command += ["--module", module]
        self._log = open(log_path, "a") if log_path else tempfile.TemporaryFile("w+")
        self._log_path = log_path
        self._process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self._log, text=True, start_new_session=True,
                                         env=_worker_environment(env))
        self._replies: queue.Queue = queue.Queue()
        threading.Thread(target=self._read_replies, name=f"worker-{kernel}", daemon=True).start()
        ready = self._next_reply(STARTUP_TIMEOUT_S)
        if ready.get("event") != "ready":
            self.close()
            raise WorkerStartError(ready["status"], f"worker could not start: {ready['reason']}")

    def _read_replies(self) -> None:
        for line in self._process.stdout:
            self._replies.put(json.loads(line))
        self._replies.put(None)

    def _next_reply(self, timeout_s: float) -> dict[str, Any]:
        """The next reply, or a crash / timeout result (the worker is then gone)."""
        try:
            reply = self._replies.get(timeout=timeout_s)
        except queue.Empty:
            self._kill()
            return {"status": "timeout", "reason": f"no result within {timeout_s:g} s (warm-up and "
                                                   "compilation included); worker killed"}
        if reply is None:
            return {"status": "crash", "reason": self._death_message()}
        return reply

    def measure(self, point: SweepPoint, timeout_s: float) -> dict[str, Any]:
        """Measured columns of one point; status crash / timeout when the worker died or hung."""
        try:
            self._process.stdin.write(json.dumps(asdict(point)) + "\n")
            self._process.stdin.flush()
        except BrokenPipeError:
            return {"status": "crash", "reason": self._death_message()}
        return self._next_reply(timeout_s)

    @property
    def alive(self) -> bool:
        return self._process.poll() is None

    def _death_message(self) -> str:
        code = self._process.wait()
        cause = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
        tail = self._log_tail()
        return one_line(f"worker died with {cause}" + (f": {tail}" if tail else ""))

    def _log_tail(self, lines: int = 3) -> str:
        """The last lines the worker wrote to stderr since the header of its current point."""
        self._log.flush()
        if self._log_path is not None:
            text = self._log_path.read_text(errors="replace")
        else:
            self._log.seek(0)
            text = self._log.read()
        all_lines = text.splitlines()
        headers = [index for index, line in enumerate(all_lines) if line.startswith(POINT_HEADER)]
        current = all_lines[headers[-1] + 1:] if headers else all_lines
        return " | ".join([line for line in current if line.strip()][-lines:])

    def _kill(self) -> None:
        try:
            os.killpg(self._process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self._process.wait()

    def close(self) -> None:
        """Let the worker finish (stdin closed), kill it if it does not exit promptly."""
        if self.alive:
            try:
                self._process.stdin.close()
                self._process.wait(timeout=10)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self._kill()
        self._log.close()


def measure_kernel_points(kernel: str, points: Iterable[SweepPoint], *, device: str, timeout_s: float,
                          warmup: int, repeats: int, modules: tuple[str, ...] = (),
                          log_path: Path | None = None, env: dict[str, str] | None = None,
                          check_at: str = "small") -> Iterator[tuple[SweepPoint, dict[str, Any]]]:
    """Measure points of one kernel in worker processes; yields (point, measured columns) in order.

    A worker that crashed or timed out is replaced for the next point; a worker that cannot start gives
    every remaining point its start failure. ``env`` is added to the workers' environment; ``check_at`` is
    the size of the correctness gate (`measure.ReferenceGate`).
    """
    worker: KernelWorker | None = None
    start_failure: dict[str, Any] | None = None
    try:
        for point in points:
            if start_failure is None and worker is None:
                try:
                    worker = KernelWorker(kernel, device, modules, warmup, repeats, log_path, env, check_at)
                except WorkerStartError as exc:
                    start_failure = {"status": exc.status, "reason": exc.reason}
            if start_failure is not None:
                yield point, start_failure
                continue
            result = worker.measure(point, timeout_s)
            if result["status"] in ("crash", "timeout") or not worker.alive:
                worker.close()
                worker = None
            yield point, result
    finally:
        if worker is not None:
            worker.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="tflabench measurement worker (started by tflabench sweep)")
    parser.add_argument("--kernel", required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--module", action="append", default=[])
    parser.add_argument("--warmup", type=int, required=True)
    parser.add_argument("--repeats", type=int, required=True)
    parser.add_argument("--check-at", choices=("small", "full"), default="small")
    args = parser.parse_args(argv)
    return serve(args.kernel, args.device, tuple(args.module), args.warmup, args.repeats, args.check_at)


if __name__ == "__main__":
    sys.exit(main())
