"""Hand-written several-device graphs for the rank-program and multi-GPU runtime tests.

- `COLLECTIVES`: each collective once, on inputs (so even a fake GPU whose kernels compute
  nothing moves real values through them): an all_reduce, an all_gather along a non-leading axis
  (NCCL's layout needs reordering), one along the leading axis, and a send/recv pair.
- `TP_PP`: a small tensor-parallel MLP (column-parallel, row-parallel, `all_reduce`) feeding a
  pipeline stage on device 1 through `send`/`recv`, and an `all_gather` of the split activation.
- `FOUR_DEVICES`: collectives of two sub-groups ([0, 1] and [3, 2]) of four devices.
- `ONE_MEMBER`: an all_reduce over the group [0] (one rank, a one-member communicator).
"""

from __future__ import annotations

COLLECTIVES = """graph collectives {
  input %a : f32[4,8]
  input %b : f32[4,8] !{device = 1}
  %s = all_reduce(%a, %b) {group = [0, 1]} : f32[4,8] !{device = [0, 1]}
  %g = all_gather(%a, %b) {group = [0, 1], axis = 1} : f32[4,16] !{device = [0, 1]}
  %g0 = all_gather(%a, %b) {group = [0, 1], axis = 0} : f32[8,8] !{device = [0, 1]}
  %t = send(%a) {to = 1} : f32[4,8]
  %r = recv(%t) {from = 0} : f32[4,8] !{device = 1}
  output %s, %g, %g0, %r
}
"""

TP_PP = """graph tp_pp {
  input %x : f32[2,16] !{device = [0, 1]}
  weight %w1.d0 : f32[16,8]
  weight %w1.d1 : f32[16,8] !{device = 1}
  weight %w2.d0 : f32[8,16]
  weight %w2.d1 : f32[8,16] !{device = 1}
  %h.d0 = matmul(%x, %w1.d0) : f32[2,8]
  %h.d1 = matmul(%x, %w1.d1) : f32[2,8] !{device = 1}
  %a.d0 = gelu(%h.d0) : f32[2,8]
  %a.d1 = gelu(%h.d1) : f32[2,8] !{device = 1}
  %p.d0 = matmul(%a.d0, %w2.d0) : f32[2,16]
  %p.d1 = matmul(%a.d1, %w2.d1) : f32[2,16] !{device = 1}
  %s = all_reduce(%p.d0, %p.d1) {group = [0, 1]} : f32[2,16] !{device = [0, 1]}
  %y = add(%s, %x) : f32[2,16] !{device = [0, 1]}
  %g = all_gather(%a.d0, %a.d1) {group = [0, 1], axis = 1} : f32[2,16] !{device = [0, 1]}
  %z = exp(%y) : f32[2,16]
  %t = send(%z) {to = 1} : f32[2,16]
  %r = recv(%t) {from = 0} : f32[2,16] !{device = 1}
  %o = mul(%r, %g) : f32[2,16] !{device = 1}
  output %y, %o
}
"""

FOUR_DEVICES = """graph four {
  input %a : f32[8] !{device = 0}
  input %b : f32[8] !{device = 1}
  input %c : f32[8] !{device = 2}
  input %d : f32[8] !{device = 3}
  %s01 = all_reduce(%a, %b) {group = [0, 1]} : f32[8] !{device = [0, 1]}
  %s32 = all_reduce(%d, %c) {group = [3, 2]} : f32[8] !{device = [3, 2]}
  %t = send(%s01) {to = 2} : f32[8] !{device = 1}
  %r = recv(%t) {from = 1} : f32[8] !{device = 2}
  output %s01, %s32, %r
}
"""

ONE_MEMBER = """graph one_member {
  input %a : f32[4,8]
  %h = exp(%a) : f32[4,8]
  %s = all_reduce(%h) {group = [0]} : f32[4,8]
  output %s
}
"""
