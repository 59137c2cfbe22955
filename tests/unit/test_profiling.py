"""The throughput profile's breakdown (bert/tools/throughput/profiling.py). The CUDA path is
checked on synthetic events shaped like the profiler's: the 2026-11-26 H100 profile counted the
optimizer's and the custom ops' user annotations on top of their kernels (173 ms in a 133 ms
step), and its top-ops list named CPU ops beside their own kernels."""

from __future__ import annotations

from types import SimpleNamespace

import torch
from torch.autograd import DeviceType

from bert.tools.throughput import profiling


def event(name, start, end, device=DeviceType.CUDA, annotation=False):
    return SimpleNamespace(
        name=name,
        device_type=device,
        is_user_annotation=annotation,
        time_range=SimpleNamespace(start=start, end=end),
    )


def test_cuda_breakdown_counts_kernels_only():
    events = [
        event("Optimizer.step#LAMB.step", 0, 100, annotation=True),  # spans the two below
        event("void multi_tensor_apply_kernel<...>", 0, 40),
        event("void multi_tensor_apply_kernel<...>", 50, 100),
        event("bert_kernels_cuda::dense_forward", 100, 160, annotation=True),
        event("nvjet_sm90_tst_128x256", 100, 160),
        event("aten::mm", 0, 160, device=DeviceType.CPU),  # a CPU op: never device time
    ]
    totals, busy = profiling._cuda_breakdown(events)
    assert totals == {"optimizer": 90, "gemm": 60}
    assert busy == 150  # the union of the kernels' intervals, the 40..50 gap excluded


def test_top_ops_on_cuda_lists_kernels_not_the_ops_that_launched_them():
    def avg(key, us, device=DeviceType.CUDA, annotation=False):
        return SimpleNamespace(
            key=key,
            self_device_time_total=us,
            self_cpu_time_total=0,
            device_type=device,
            is_user_annotation=annotation,
        )

    prof = SimpleNamespace(
        key_averages=lambda: [
            avg("bert_kernels_cuda::dense_wgrad", 14_000, device=DeviceType.CPU),
            avg("bert_kernels_cuda::dense_wgrad", 14_000, annotation=True),
            avg("nvjet_sm90_tst_256x160", 7_000),
            avg("void pytorch_flash::flash_bwd_kernel", 9_000),
        ]
    )
    rows = profiling._top_ops(prof, torch.device("cuda"))
    assert rows == [
        ["void pytorch_flash::flash_bwd_kernel", 9.0, "attention"],
        ["nvjet_sm90_tst_256x160", 7.0, "gemm"],
    ]


def test_cpu_profile_of_a_step_adds_up_to_its_wall_time():
    x = torch.randn(64, 64)
    profile = profiling.profile_step(lambda index: (x @ x).relu().sum(), 0, torch.device("cpu"))
    assert profile["ms"]["gemm"] > 0
    assert abs(sum(profile["ms"].values()) - profile["wall_ms"]) <= 0.01 * profile["wall_ms"] + 0.01


def test_kernel_names_with_lambdas_are_not_the_optimizer():
    """PyTorch's elementwise kernels carry `{lambda()#2}` in their names, and "lamb" matched
    them: the 2026-11-26b H100 profile put GeLU and its backward (5.3 ms) under optimizer."""
    gelu = (
        "void at::native::vectorized_elementwise_kernel<8, at::native::GeluCUDAKernelImpl("
        "at::TensorIteratorBase&, at::native::GeluType)::{lambda()#2}::operator()() const>"
    )
    assert profiling.categorize(gelu) == "elementwise_other"
    fused_lamb = "void bert_kernels::update_kernel<float>(bert_kernels::LambUpdateArgs)"
    assert profiling.categorize(fused_lamb) == "optimizer"
    assert profiling.categorize("void multi_tensor_apply_kernel<...>") == "optimizer"
    assert profiling.categorize("aten::_foreach_mul_") == "optimizer"
