"""The dequantize kernel's stores (`quantized.dequantize_launch`) in the CPU emulator: through
shared memory and out in 16-byte pieces where the output is 16-byte aligned, a value at a time
where it is not; bit for bit gguf's values either way, over several warps and blocks and a last
warp of fewer than 32 units."""

from __future__ import annotations

import numpy as np
import pytest

from optgraph.codegen.kernels import quantized
from optgraph.ir.graph import TensorType
from tests.codegen.test_quantized_kernels_emulated import NUMPY, random_blocks, reference
from tests.support import cuda_emulator

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")


@pytest.mark.parametrize(
    ("dtype", "rows", "k", "out", "shift"),
    [
        ("q4_k", 5, 1024, "f16", 0),  # 160 units: two blocks of 4 warps, the last warp whole
        ("q8_0", 7, 96, "f32", 0),  # 21 units: one warp, 11 lanes idle
        ("q6_k", 3, 1280, "bf16", 0),  # 120 units: the fourth warp has 24
        ("q5_0", 9, 160, "f16", 2),  # out 2 bytes past a 16-byte boundary: a value at a time
        ("q4_k", 2, 512, "f32", 4),
    ],
)
def test_dequantize_stores_are_the_reference_bits(
    dtype: str, rows: int, k: int, out: str, shift: int
) -> None:
    raw = random_blocks(dtype, rows, k, seed=rows + k)
    want = reference(dtype, raw).reshape(rows, k).astype(NUMPY[out])
    launch = quantized.dequantize_launch(TensorType(dtype, (rows, k)), out)
    nbytes = want.nbytes
    buffer = np.zeros(nbytes + 16, np.uint8)  # the output, `shift` bytes in
    got = cuda_emulator.run_kernel(
        launch.kernel, launch.grid, launch.block, [buffer, raw], setup=[f"b0 += {shift};"]
    )[0]
    # the emulator reads the buffer back from the moved pointer: the output is its start
    values = got[:nbytes].view(want.dtype).reshape(want.shape)
    np.testing.assert_array_equal(values.view(np.uint8), want.view(np.uint8))
    assert not got[nbytes : nbytes + 16 - shift].any()  # nothing written past the output
