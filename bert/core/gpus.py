"""Known GPU kinds: memory, dense bf16 rate, links, and published MLPerf BERT throughput.

Figures are vendor datasheet values (dense, no sparsity) and, where a published MLPerf BERT
result exists, the per-GPU training throughput of those runs (REFERENCE 4 and 7). The published
throughputs come from the best submissions (FP8, packed sequences, CUDA graphs); this program
does not reach them yet, so they are an upper bound, and the planner always prints the
efficiency it assumed. A cluster of another kind is described with explicit numbers
(`--memory-gib`, `--tflops`, `--efficiency`, `--link-gbps`).
"""

from __future__ import annotations

from dataclasses import dataclass

from bert.core.errors import BadInputError
from bert.core.inputs import check_float


@dataclass(frozen=True)
class GPUKind:
    name: str
    memory_gib: float  # device memory as the driver reports it (GiB)
    bf16_tflops: float  # dense bf16 tensor-core peak, TFLOP/s
    nvlink_gbs: float  # per-GPU NVLink bandwidth, one direction, GB/s
    network_gbs: float  # per-GPU inter-node network bandwidth, GB/s (one NIC per GPU)
    published_samples_per_s: float | None  # per-GPU MLPerf BERT training throughput
    source: str  # where the throughput comes from
    # this program's own measured per-GPU throughput (BERT-Large bf16, a GPU window's record,
    # validated paths only): the planner's default where it exists, since it predicts a run of
    # this program, not of the best submission
    own_samples_per_s: float | None = None
    own_source: str = ""
    # the scale model's default calibration: the published 8-GPU result of this kind that
    # bert.plan.fit's rule picks (`round:folder` of bert/plan/published_results.json; a test
    # checks the rule), and the NVLink domain (GPUs per NVLink fabric; None: one node)
    calibration: str = ""
    nvlink_domain: int | None = None

    def throughput_basis(self) -> tuple[float | None, str]:
        """(per-GPU samples/s, where it comes from) the default efficiency is implied by."""
        if self.own_samples_per_s:
            return self.own_samples_per_s, self.own_source
        return self.published_samples_per_s, self.source

    @property
    def link_note(self) -> str:
        return f"NVLink {self.nvlink_gbs:g} GB/s, network {self.network_gbs:g} GB/s per GPU"


# Datasheets: A100 312 TFLOP/s bf16, NVLink3 600 GB/s both ways; H100/H200 SXM 989 TFLOP/s,
# NVLink4 900 GB/s; B200 2,250 TFLOP/s (HGX B200), NVLink5 1,800 GB/s. Networks: HDR 200 Gb/s
# per A100, NDR 400 Gb/s per H100/H200/B200 (the reference DGX systems).
GPUS: dict[str, GPUKind] = {
    "a100-40gb": GPUKind(
        "a100-40gb",
        40.0,
        312.0,
        300.0,
        25.0,
        305.0,
        "REFERENCE 7: A100 about 305 samples/s per GPU (MLPerf v2.x, fp16)",
        calibration="v3.0:Dell/results/2xXE8545x4A100-SXM-40GB/bert",
    ),
    "a100-80gb": GPUKind(
        "a100-80gb",
        80.0,
        312.0,
        300.0,
        25.0,
        305.0,
        "REFERENCE 7: A100 about 305 samples/s per GPU (MLPerf v2.x, fp16)",
        calibration="v3.0:Dell/results/XE9680x8A100-SXM-80GB/bert",
    ),
    "h100": GPUKind(
        "h100",
        79.6,
        989.0,
        450.0,
        50.0,
        973.0,
        "REFERENCE 7: H100 971-975 samples/s per GPU (MLPerf v3.0/v4.0, FP8)",
        524.37,
        "this program on one H100, bf16, flash_varlen, no custom kernels: "
        "benchmarks/results/gpu/2026-11-26_window/throughput_eager.json",
        calibration="v3.0:Dell/results/XE9680x8H100-SXM-80GB/bert",
    ),
    "h200": GPUKind(
        "h200",
        140.4,
        989.0,
        450.0,
        50.0,
        1032.0,
        "REFERENCE 7: H200 1,032 samples/s per GPU (MLPerf v4.1, FP8)",
        calibration="v4.0:NVIDIA/results/h200_ngc23.09_pytorch/bert",
    ),
    "b200": GPUKind(
        "b200",
        179.0,
        2250.0,
        900.0,
        50.0,
        1471.0,
        "REFERENCE 7: B200 1,471 samples/s per GPU (MLPerf v5.0, FP8)",
        calibration="v4.1:NVIDIA/results/b200_preview_pytorch/bert",
    ),
    # GB200 NVL72: B200-class GPU (datasheet 2,500 TFLOP/s bf16 dense per GPU), 4 per node,
    # NVLink5 1,800 GB/s both ways across the 72-GPU rack, one NDR 400 Gb/s NIC per GPU
    "gb200": GPUKind(
        "gb200",
        184.0,
        2500.0,
        900.0,
        50.0,
        None,
        "published_results.json",
        calibration="v5.0:NVIDIA/results/tyche_ngpu8_ngc25.04_pytorch/bert",
        nvlink_domain=72,
    ),
    # H100 PCIe: 756 TFLOP/s bf16 dense, 80 GB; no NVSwitch: gradients cross PCIe Gen5
    # (64 GB/s one direction)
    "h100-pcie": GPUKind(
        "h100-pcie",
        79.6,
        756.0,
        64.0,
        50.0,
        None,
        "published_results.json",
        calibration="v3.0:Supermicro/results/AS-4125GS-TNRT_8_H100-PCIe-80GB/bert",
    ),
    # Intel Gaudi2 (bf16): 96 GB HBM2e, about 432 TFLOP/s bf16 dense; 24 x 100 GbE RoCE on chip,
    # 21 inside the node (262.5 GB/s one direction), 3 out (37.5 GB/s)
    "gaudi2": GPUKind(
        "gaudi2",
        96.0,
        432.0,
        262.5,
        37.5,
        None,
        "published_results.json",
        calibration="v3.0:Supermicro/results/SYS-820GH-TNR2/bert",
    ),
}
ALIASES = {
    "h100-80gb": "h100",
    "h100-sxm": "h100",
    "h200-141gb": "h200",
    "a100": "a100-80gb",
    "gb200-nvl72": "gb200",
    "h100pcie": "h100-pcie",
    "hl-225": "gaudi2",
}


class GPUError(BadInputError):
    """An unknown GPU kind or impossible explicit numbers."""


def lookup(name: str) -> GPUKind:
    key = ALIASES.get(name.lower(), name.lower())
    if key not in GPUS:
        known = ", ".join([*GPUS, *ALIASES])
        raise GPUError(
            f"--gpu {name!r}: unknown GPU kind (known: {known}; or give --memory-gib "
            f"and --tflops for another kind)"
        )
    return GPUS[key]


def custom(
    name: str, memory_gib: float, tflops: float, link_gbs: float, samples_per_s: float | None
) -> GPUKind:
    """A kind described by explicit numbers (`--gpu NAME --memory-gib M --tflops T`)."""
    for flag, value in (
        ("--memory-gib", memory_gib),
        ("--tflops", tflops),
        ("--link-gbps", link_gbs),
    ):
        check_float(value, flag, GPUError, low=0.0)  # inf memory or rate would plan nonsense
    return GPUKind(
        name,
        memory_gib,
        tflops,
        link_gbs,
        link_gbs,
        samples_per_s,
        "given on the command line" if samples_per_s else "none",
    )
