"""A slice with a step (`x[..., ::2]`, ONNX `Slice` with `steps`) as IR nodes without a strided op.

The positions kept along `axis` are `range(start, end, step)` (step > 1), `count` of them:

    x : f32[2,10]      x[:, 1::3]  (positions 1, 4, 7: count 3, step 3)
    %a = slice(%x) {axis = 1, start = 1, end = 10}     f32[2,9]    the range, whole steps
    %b = reshape(%a) {shape = [2,3,3]}                             [.., count, step, ..]
    %c = slice(%b) {axis = 2, start = 0, end = 1}      f32[2,3,1]  the first of each step
    %y = reshape(%c) {shape = [2,3]}

Where the last step runs past the axis's end, the range is padded (zeros) to whole steps first.
GPT-J's, CodeGen's and Cohere's interleaved rotary embeddings slice so. O(1) nodes a slice.
"""

from __future__ import annotations

from optgraph.ir.graph import AttrValue


def stepped_slice_nodes(
    shape: tuple[int, ...], axis: int, picked: range
) -> list[tuple[str, dict[str, AttrValue], tuple[int, ...]]]:
    """(op, attrs, result shape) of each node, in order, taking `picked` (step > 1, not empty)
    along `axis` of a value of `shape`; the last one's result is the slice's."""
    count, step, start = len(picked), picked.step, picked.start
    size = shape[axis]
    stop = min(size, start + count * step)

    def along(*lengths: int) -> tuple[int, ...]:
        return shape[:axis] + lengths + shape[axis + 1 :]

    nodes: list[tuple[str, dict[str, AttrValue], tuple[int, ...]]] = []
    if (start, stop) != (0, size):
        nodes.append(("slice", {"axis": axis, "start": start, "end": stop}, along(stop - start)))
    short = start + count * step - stop
    if short:
        pads = [0] * (2 * len(shape))
        pads[len(shape) + axis] = short
        nodes.append(("pad", {"pads": tuple(pads)}, along(count * step)))
    nodes.append(("reshape", {"shape": along(count, step)}, along(count, step)))
    nodes.append(("slice", {"axis": axis + 1, "start": 0, "end": 1}, along(count, 1)))
    nodes.append(("reshape", {"shape": along(count)}, along(count)))
    return nodes
