"""The image ops' type rules: `resize`, nearest and linear resampling of `[N,C,H,W]` (last axes).

    %y = resize(%x) {size = [16, 16]} : f32[1,4,16,16]                       (x : f32[1,4,8,8])
    %z = resize(%x) {coordinates = "half_pixel", mode = "linear", size = [12, 20]} : ...

What diffusers' upsamplers (`F.interpolate(scale_factor=2, mode="nearest")`), its VAE and the
ONNX `Resize` of exporters compute. Output row `y` (and column likewise) reads the input at
`src(y)`, in float32, with `r` = input / output size, or 1 / `scale_h` when given (ONNX's and
torch's scale factors: the coordinate map uses the given factor, which may differ from the
sizes' ratio after flooring):

- `coordinates`: "asymmetric" `y · r`; "half_pixel" `(y + 0.5) · r − 0.5`; "pytorch_half_pixel"
  the same, 0 when the output has one row; "align_corners" `y · (H − 1) / (Ho − 1)` (0 for one
  row);
- `mode = "nearest"`: the row `nearest(src)` (`floor`, `ceil`, `round_prefer_floor`,
  `round_prefer_ceil`: halves down or up), clamped to [0, H − 1];
- `mode = "linear"`: src clamped to [0, H − 1], then the two rows around it weighted by their
  distance; bilinear over both axes (torch's `bilinear`, ONNX's `linear`).

Errors name the op and the fact: `resize: x must be [N,C,H,W], got f32[2,3]`.
"""

from __future__ import annotations

from optgraph.ir.graph import Node, TensorType
from optgraph.ir.op_rules import Attrs, Types, fail

MODES: tuple[str, ...] = ("nearest", "linear")
COORDINATES: tuple[str, ...] = ("asymmetric", "half_pixel", "pytorch_half_pixel", "align_corners")
NEAREST: tuple[str, ...] = ("floor", "ceil", "round_prefer_floor", "round_prefer_ceil")


def resize(node: Node, types: Types, attrs: Attrs) -> TensorType:
    x = types[0]
    if x.rank != 4:
        fail(node, f"x must be [N,C,H,W], got {x}")
    if x.dtype not in ("f32", "f16", "bf16"):
        fail(node, f"expected a float x, got {x}")
    size = attrs["size"]
    if not isinstance(size, tuple) or len(size) != 2 or min(size) < 1:
        fail(node, f"attribute 'size' must be 2 positive ints [Ho, Wo], got {size}")
    for key in ("scale_h", "scale_w"):
        scale = attrs.get(key)
        if scale is not None and not (isinstance(scale, int | float) and scale > 0):
            fail(node, f"attribute '{key}' must be positive, got {scale}")
    if min(x.shape[2:]) < 1:
        fail(node, f"x {x} has no rows or columns to read")
    return x.with_shape((x.shape[0], x.shape[1], int(size[0]), int(size[1])))
