"""assign-streams issues a node computed from weights alone (a view or cast of a weight) just
before its first reader, not at the head of the program, where the estimated schedule starts
it: there it made weight streaming chain every weight between the head and the real reader into
one segment (diffusers' UNet: a group norm's `reshape(weight)` at the head, its reader at the
end), and a cast's result held arena bytes all that time."""

from __future__ import annotations

import warnings

import numpy as np

import optgraph as og
from optgraph.analysis.segments import device_memory, group_weights, weight_accesses
from optgraph.ir.graph import Graph
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from tests.support.offload_models import run_planned

LAYERS = 6
PLAN = "assign-streams{max-streams=2,min-branch-us=0},insert-sync,analyze-lifetimes,plan-memory"


def _model() -> Graph:
    """Two branches a layer (so two streams), each layer scaled by its own weight read through a
    reshape (a view), and at the end a norm whose f16 weight is read through a cast and a
    reshape: nodes of weights alone, each read by one layer."""
    lines = ["graph late {", "  input %x : f32[4,64]", "  weight %g : f16[64]"]
    for i in range(LAYERS):
        lines += [
            f"  weight %a{i} : f32[64,64]",
            f"  weight %b{i} : f32[64,64]",
            f"  weight %n{i} : f32[64]",
        ]
    h = "%x"
    for i in range(LAYERS):
        lines += [
            f"  %n{i}row = reshape(%n{i}) {{shape = [1, 64]}} : f32[1,64]",
            f"  %r{i} = mul({h}, %n{i}row) : f32[4,64]",
            f"  %p{i} = matmul(%r{i}, %a{i}) : f32[4,64]",
            f"  %q{i} = matmul(%r{i}, %b{i}) : f32[4,64]",
            f"  %h{i} = add(%p{i}, %q{i}) : f32[4,64]",
        ]
        h = f"%h{i}"
    lines += [
        '  %g32 = cast(%g) {dtype = "f32"} : f32[64]',
        "  %grow = reshape(%g32) {shape = [1, 64]} : f32[1,64]",
        f"  %n = rms_norm({h}, %g32) {{eps = 1e-05}} : f32[4,64]",
        "  %y = mul(%n, %grow) : f32[4,64]",
        "  output %y",
        "}",
    ]
    return og.parse("\n".join(lines))


def test_weight_only_nodes_are_issued_just_before_their_first_reader() -> None:
    planned = run_pipeline(_model(), PLAN)
    assert len({n.stream for n in planned.nodes if not n.is_event}) == 2
    order = [n.name for n in planned.nodes if not n.is_event]
    last_layer = order.index(f"h{LAYERS - 1}")
    assert order.index("g32") > last_layer and order.index("grow") > last_layer
    assert order.index("g32") < order.index("grow") < order.index("y")
    assert order.index("g32") < order.index("n")
    for i in range(1, LAYERS):  # each layer's view after the layer before
        assert order.index(f"h{i - 1}") < order.index(f"n{i}row") < order.index(f"r{i}")


def test_streaming_streams_each_layer_norm_weight_with_its_layer() -> None:
    """With the views at the head, each layer's scale weight looked read from the first node to
    its layer: that chains the layers' weights into one group, so grouping pinned those weights
    resident instead. Issued late, they stream with their layers."""
    source = _model()
    planned = run_pipeline(source, PLAN)
    budget = int(device_memory(planned).peak * 0.3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        streamed = run_pipeline(planned, f"plan-prefetch{{budget={budget}}}")
    accesses = weight_accesses(planned)
    order = sorted(accesses, key=lambda w: accesses[w][0])
    groups, pinned = group_weights(order, accesses, {w.name: w.type.nbytes for w in source.weights})
    assert pinned == [] and len(groups) >= 2 * LAYERS  # a norm weight in each layer's group
    segments = {w.ann.segment for w in streamed.weights} - {None}
    assert len(segments) >= LAYERS
    assert device_memory(streamed).peak <= budget
    inputs, weights = random_inputs(source), random_weights(source)
    expected = run_reference(source, inputs, weights)
    for seed in range(4):
        got = run_planned(streamed, inputs, weights, seed)
        assert np.array_equal(got["y"], expected["y"]), seed
