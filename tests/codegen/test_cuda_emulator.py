"""The CPU emulator of generated kernels (tests/support/cuda_emulator.py) is itself checked: its
barriers and shuffles order a block's threads as CUDA does, and a kernel that would hang or
whose synchronization the emulator missed fails loudly instead of computing wrong bits."""

from __future__ import annotations

import numpy as np
import pytest

from optgraph.codegen.cuda_source import make_kernel
from tests.support import cuda_emulator

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")

PARAMS = ("float* out", "const float* in0")
# Each thread writes its mirror's value: right only if every write lands before any read.
REVERSE = """  __shared__ float tile[96];
  tile[threadIdx.x] = in0[blockIdx.x * blockDim.x + threadIdx.x];
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = tile[blockDim.x - 1 - threadIdx.x];
"""


def test_barrier_orders_shared_memory_writes_before_reads() -> None:
    x = np.arange(2 * 96, dtype=np.float32)
    out, _ = cuda_emulator.run_kernel(
        make_kernel("reverse", PARAMS, REVERSE), (2, 1, 1), (96, 1, 1), [np.zeros_like(x), x]
    )
    assert np.array_equal(out, x.reshape(2, 96)[:, ::-1].ravel())


def test_block_reduction_with_warp_shuffles() -> None:
    body = """  __shared__ float scratch[32];
  const float v = in0[blockIdx.x * blockDim.x + threadIdx.x];
  const float s = og_block_reduce(v, scratch, OgSum(), 0.0f);
  if (threadIdx.x == 0) out[blockIdx.x] = s;
"""
    x = np.arange(3 * 256, dtype=np.float32) % 17
    out, _ = cuda_emulator.run_kernel(
        make_kernel("block_sum", PARAMS, body), (3, 1, 1), (256, 1, 1), [np.zeros(3, np.float32), x]
    )
    assert np.array_equal(out, x.reshape(3, 256).sum(axis=1))


def test_barrier_skipped_by_some_threads_is_a_deadlock() -> None:
    body = "  if (threadIdx.x == 0) __syncthreads();\n  out[threadIdx.x] = in0[threadIdx.x];\n"
    x = np.ones(64, np.float32)
    with pytest.raises(cuda_emulator.EmulationError, match="deadlock"):
        cuda_emulator.run_kernel(
            make_kernel("skip", PARAMS, body), (1, 1, 1), (64, 1, 1), [np.zeros_like(x), x]
        )


def test_a_barrier_missed_by_the_text_scan_aborts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Were a kernel's barrier hidden from `THREAD_SYNC`, its threads would run one by one and the
    first barrier reached stops the run."""
    monkeypatch.setattr(cuda_emulator, "THREAD_SYNC", ())
    x = np.ones(96, np.float32)
    with pytest.raises(cuda_emulator.EmulationError, match="reached a barrier"):
        cuda_emulator.run_kernel(
            make_kernel("reverse", PARAMS, REVERSE), (1, 1, 1), (96, 1, 1), [np.zeros_like(x), x]
        )
