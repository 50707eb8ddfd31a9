"""analysis/host_syncs: cross-boundary waits counted in the IR, and the placement's minimum."""

from __future__ import annotations

import optgraph as og
from optgraph.analysis.host_syncs import host_device_waits, min_host_device_syncs
from optgraph.passes.manager import run_pipeline

CHAIN = """graph g {
  input %x : f32[1,2,8,8]
  weight %k : f32[2,2,3,3]
  %a = conv2d(%x, %k) {padding = [1, 1]} : f32[1,2,8,8]
  %p = max_pool2d(%a) {kernel = [2, 2]} : f32[1,2,4,4]
  %b = conv2d(%p, %k) {padding = [1, 1]} : f32[1,2,4,4]
  %q = max_pool2d(%b) {kernel = [2, 2]} : f32[1,2,2,2]
  %c = conv2d(%q, %k) {padding = [1, 1]} : f32[1,2,2,2]
  output %c
}
"""


def test_a_chain_of_splits_needs_one_wait_per_boundary() -> None:
    split = run_pipeline(og.parse(CHAIN), "split-backends{cpu-ops=max_pool2d},insert-sync")
    # GPU -> CPU -> GPU -> CPU -> GPU: four backend changes on the one path.
    assert min_host_device_syncs(split) == 4
    assert host_device_waits(split) == 4


def test_no_split_no_sync() -> None:
    graph = run_pipeline(og.parse(CHAIN), "assign-streams,insert-sync")
    assert host_device_waits(graph) == min_host_device_syncs(graph) == 0


def test_a_redundant_wait_is_counted() -> None:
    """The count reads the IR as it is: a second host wait for the same GPU point counts too."""
    split = run_pipeline(og.parse(CHAIN), "split-backends{cpu-ops=max_pool2d}")
    text = og.print_graph(split)
    wait = next(line for line in text.splitlines() if "wait ^d2h0" in line)
    doubled = og.parse(text.replace(wait, wait + "\n" + wait))
    assert host_device_waits(doubled) == host_device_waits(split) + 1
    assert min_host_device_syncs(doubled) == min_host_device_syncs(split)
