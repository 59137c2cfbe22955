"""Clocks, memory meters and the matmul peak for bench_throughput.py (CPU and CUDA alike).

Memory: CUDA reads the caching allocator (`max_memory_allocated`). The CPU has no allocator
counter, so the process's resident set is used: Linux lets a process reset its high-water mark
(`echo 5 > /proc/self/clear_refs`) and read it back as VmHWM in /proc/self/status. RSS also
counts memory the C allocator keeps after a free, so CPU figures are approximate (a few %).
Without /proc (not Linux) the peak falls back to getrusage's ru_maxrss, which cannot be reset
and is then the whole process's peak.
"""

from __future__ import annotations

import platform
import resource
import statistics
import time
from pathlib import Path

import torch

from bert.submission.system_desc import cpu_model

_CLEAR_REFS = Path("/proc/self/clear_refs")
_STATUS = Path("/proc/self/status")


def synchronize(device: torch.device) -> None:
    """Wait for queued device work (the only syncs: before and after a timed block)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: torch.device) -> str:
    """The name PyTorch reports for a GPU; the CPU model from /proc/cpuinfo otherwise."""
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return cpu_model() or platform.processor() or platform.machine()


class MemoryMeter:
    """Current and peak memory (bytes) of the device, with a resettable peak."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cpu_resettable = device.type == "cpu" and _CLEAR_REFS.exists()
        if device.type == "cuda":
            self.method = "torch.cuda.max_memory_allocated (caching allocator, tensors only)"
        elif self.cpu_resettable:
            self.method = "process RSS high-water mark (VmHWM after clear_refs=5), approximate"
        else:
            self.method = "getrusage ru_maxrss (not resettable: process-wide peak)"

    def current(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.memory_allocated(self.device)
        return _status_kib("VmRSS") * 1024 if _STATUS.exists() else 0

    def reset_peak(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        elif self.cpu_resettable:
            _CLEAR_REFS.write_text("5")

    def peak(self) -> int:
        if self.device.type == "cuda":
            return torch.cuda.max_memory_allocated(self.device)
        if _STATUS.exists():
            return _status_kib("VmHWM") * 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _status_kib(key: str) -> int:
    for line in _STATUS.read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def timed_block(step, first: int, steps: int, device: torch.device) -> tuple[float, float]:
    """Run step(first) .. step(first+steps-1); returns (wall seconds, process CPU seconds)."""
    synchronize(device)
    wall, cpu = time.perf_counter(), time.process_time()
    for i in range(first, first + steps):
        step(i)
    synchronize(device)
    return time.perf_counter() - wall, time.process_time() - cpu


def matmul_peak_tflops(device: torch.device, precision: str) -> dict:
    """Best rate of a large square matmul in the run's precision, measured here and now.

    MFU is taken against this number rather than a datasheet figure, so it reflects what the
    device (and, on a shared CPU, its current load) can actually deliver.
    """
    dtype = torch.bfloat16 if precision == "bf16" else torch.float32
    n = 8192 if device.type == "cuda" else 1024  # large enough to reach the GEMM plateau
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    for _ in range(2):
        a @ b
    times = []
    for _ in range(10 if device.type == "cpu" else 20):
        synchronize(device)
        start = time.perf_counter()
        a @ b
        synchronize(device)
        times.append(time.perf_counter() - start)
    tflops = 2.0 * n**3 / min(times) / 1e12
    return {
        "tflops": tflops,
        "shape": [n, n, n],
        "dtype": str(dtype).removeprefix("torch."),
        "tf32": bool(torch.backends.cuda.matmul.allow_tf32) if device.type == "cuda" else None,
        "median_tflops": 2.0 * n**3 / statistics.median(times) / 1e12,
    }


# Dense bf16 Tensor Core peaks from NVIDIA's datasheets, TFLOP/s (the sheets print twice these,
# "with sparsity"), matched in this order against the name PyTorch reports. MFU against them
# says how far the step is from the card's nominal rate; against the matmul measured in the
# same process (matmul_peak_tflops), how far from what the card delivers to a large GEMM.
DATASHEET_BF16_TFLOPS = (
    ("H100 NVL", 835.5),
    ("H100 PCIe", 756.0),
    ("H100", 989.4),  # SXM5 (torch: "NVIDIA H100 80GB HBM3")
    ("H200", 989.4),  # SXM; the same GH100 compute as the H100 SXM5
    ("A100", 312.0),
)


def datasheet_peak(device: str, precision: str) -> dict | None:
    """The datasheet's dense peak for this device and precision, None where the table has none
    (fp32, which a GPU runs in TF32 or not by a setting; a CPU; a GPU not listed)."""
    if precision != "bf16":
        return None
    for name, tflops in DATASHEET_BF16_TFLOPS:
        if name in device:
            return {"tflops": tflops, "entry": name, "dtype": "bf16 dense (NVIDIA datasheet)"}
    return None
