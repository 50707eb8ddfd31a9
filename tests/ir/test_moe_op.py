"""The `moe` op in the IR: printed and parsed like every op, its type rule's located errors, which
of its operands may be quantized, and its cost (the experts the tokens can select, not all E)."""

from __future__ import annotations

import pytest

import optgraph as og
from optgraph.errors import VerifyError
from optgraph.ir.line_parser import parse_lines
from optgraph.ir.ops import cost, get_op
from optgraph.ir.parser import parse_with_lark

MOE = """graph moe_block {
  input %x : f16[3,64]
  input %h : f16[3,256]
  weight %router : f16[8,64]
  weight %gate : q4_k[8,32,256]
  weight %up : f16[8,32,256]
  weight %down : q5_0[8,256,32]
  weight %gate_up : q8_0[8,64,64]
  weight %down2 : bf16[8,64,32]
  %logits = matmul(%x, %router) {transpose_b = true} : f16[3,8]
  %y = moe(%h, %logits, %gate, %up, %down) {k = 2, norm_topk = true} : f16[3,256]
  %z = moe(%x, %logits, %gate_up, %down2) {act = "gelu_tanh", k = 3, routing = "topk_softmax"} : f16[3,64]
  output %y, %z
}
"""


def _diagnostics(text: str) -> list[str]:
    with pytest.raises(VerifyError) as info:
        og.verify(og.parse(text))
    out = []
    for d in info.value.diagnostics:
        assert d.span is not None, d.message
        out.append(f"{d.span.line}:{d.span.col}: {d.message}")
    return out


def _block(node: str, x: str = "f32[2,64]", logits: str = "f32[2,4]", **stacks: str) -> str:
    """A graph of one moe node (line 7) over x, logits and the expert stacks (defaults: 4
    experts, F = 32, H = 64, f32)."""
    types = {"gate": "f32[4,32,64]", "up": "f32[4,32,64]", "down": "f32[4,64,32]"} | stacks
    weights = "".join(f"  weight %{name} : {t}\n" for name, t in types.items())
    return (
        f"graph g {{\n  input %x : {x}\n  input %logits : {logits}\n{weights}  {node}\n"
        "  output %y\n}\n"
    )


def test_round_trip_through_both_parsers() -> None:
    graph = og.parse(MOE)
    og.verify(graph)
    assert og.print_graph(graph) == MOE
    assert og.print_graph(parse_with_lark(MOE)) == MOE
    fast = parse_lines("<moe>", MOE.split("\n"))
    assert fast is not None and og.print_graph(fast) == MOE
    types = graph.value_types()
    assert str(types["y"]) == "f16[3,256]" and str(types["z"]) == "f16[3,64]"


def test_defaults_and_attribute_checks() -> None:
    opdef = get_op("moe")
    assert opdef is not None and opdef.quantized_operands == (2, 3, 4)
    assert opdef.category == "opaque" and opdef.family == "moe"
    node = "%y = moe(%x, %logits, %gate, %up, %down) {{{}}} : f32[2,64]"
    assert _diagnostics(_block(node.format("norm_topk = true"))) == [
        "7:8: moe: missing required attribute 'k'"
    ]
    assert _diagnostics(_block(node.format('k = 2, routing = "topk"'))) == [
        '7:8: moe: attribute \'routing\' must be "softmax_topk" or "topk_softmax", got "topk"'
    ]
    assert _diagnostics(_block(node.format('k = 2, act = "relu"'))) == [
        '7:8: moe: attribute \'act\' must be one of "silu", "gelu", "gelu_tanh", "swiglu_oai", got "relu"'
    ]


@pytest.mark.parametrize(
    ("node", "stacks", "message"),
    [
        ("%y = moe(%x, %logits, %gate, %up, %down) {k = 5} : f32[2,64]", {},
         "moe: k = 5 must be between 1 and the 4 experts of logits f32[2,4]"),
        ("%y = moe(%x, %logits, %gate, %up, %down) {k = 0} : f32[2,64]", {},
         "moe: k = 0 must be between 1 and the 4 experts of logits f32[2,4]"),
        (('%y = moe(%x, %logits, %gate, %up, %down) {k = 2, norm_topk = true, '
          'routing = "topk_softmax"} : f32[2,64]'), {},
         'moe: norm_topk = true with routing = "topk_softmax": its k weights sum to 1'),
        ("%y = moe(%x, %logits, %gate, %up, %down) {k = 2} : f32[2,64]",
         {"up": "f32[4,16,64]"}, "moe: up f32[4,16,64] differs from [E,F,H] = [4,32,64]"),
        ("%y = moe(%x, %logits, %gate, %up, %down) {k = 2} : f32[2,64]",
         {"down": "f32[4,32,64]"}, "moe: down f32[4,32,64] differs from [E,H,F] = [4,64,32]"),
        ("%y = moe(%x, %logits, %gate, %up, %down) {k = 2} : f32[2,64]",
         {"gate": "f32[5,32,64]", "up": "f32[5,32,64]"},
         "moe: gate f32[5,32,64] differs from [E,F,H] = [4,32,64]"),
        ("%y = moe(%x, %logits, %gate, %up, %down) {k = 2} : f32[2,64]",
         {"gate": "f32[32,64]"}, "moe: gate must be [E,F,H], got f32[32,64]"),
        ("%y = moe(%x, %logits, %gate, %down) {k = 2} : f32[2,64]",
         {"gate": "f32[4,63,64]"},
         "moe: gate_up f32[4,63,64] must have 2F rows (gate's F, then up's), got 63"),
        ("%y = moe(%x, %logits, %gate, %down) {k = 2} : f32[2,64]",
         {"gate": "f32[4,64,64]", "down": "f32[4,64,16]"},
         "moe: down f32[4,64,16] differs from [E,H,F] = [4,64,32]"),
        ("%y = moe(%x, %logits, %gate, %up, %down) {k = 2} : f32[2,64]",
         {"up": "i32[4,32,64]"}, "moe: up must be f32, f16, bf16 or quantized, got i32[4,32,64]"),
        ("%y = moe(%x, %logits, %gate, %up) {k = 2} : f32[2,64]", {},
         "moe: down f32[4,32,64] differs from [E,H,F] = [4,64,16]"),
        ("%y = moe(%x, %logits, %gate, %up, %down, %down, %down) {k = 2} : f32[2,64]", {},
         ("moe: takes x, logits, then gate, up, down (or gate_up, down), each optionally "
          "followed by its bias: 4, 5, 6 or 8 operands, got 7")),
        (("%y = moe(%x, %logits, %gate, %up, %down, %down, %down, %down, %down) {k = 2} : "
          "f32[2,64]"), {}, "moe: expected 4 to 8 operands, got 9"),
    ],
)  # fmt: skip
def test_shape_rule_errors_name_the_conflict(
    node: str, stacks: dict[str, str], message: str
) -> None:
    assert _diagnostics(_block(node, **stacks)) == [f"7:8: {message}"]


@pytest.mark.parametrize(
    ("x", "logits", "message"),
    [
        ("f32[2,64,1]", "f32[2,4]", "x must be [T,H] in f32, f16 or bf16, got f32[2,64,1]"),
        ("i32[2,64]", "f32[2,4]", "x must be [T,H] in f32, f16 or bf16, got i32[2,64]"),
        ("f32[2,64]", "f32[3,4]", "logits f32[3,4] has 3 rows, x f32[2,64] has 2"),
        ("f32[2,64]", "i64[2,4]", "logits must be [T,E] in f32, f16 or bf16, got i64[2,4]"),
    ],
)
def test_x_and_logits_errors(x: str, logits: str, message: str) -> None:
    node = "%y = moe(%x, %logits, %gate, %up, %down) {k = 2} : f32[2,64]"
    assert _diagnostics(_block(node, x, logits)) == [f"7:8: moe: {message}"]


def test_quantized_only_as_expert_stacks_with_whole_blocks() -> None:
    node = "%y = moe(%x, %logits, %gate, %up, %down) {k = 2} : f32[2,256]"
    quantized = {"gate": "q4_k[4,32,256]", "up": "q5_k[4,32,256]", "down": "q8_0[4,256,32]"}
    og.verify(og.parse(_block(node, "f32[2,256]", **quantized)))
    # A quantized router (logits) is refused at the operand, naming who may read one.
    text = _block(node, "f32[2,256]", **quantized).replace(
        "input %logits : f32[2,4]", "weight %logits : q8_0[2,32]"
    )
    message = _diagnostics(text)[0]
    assert message.startswith("7:16: moe: operand '%logits' is quantized (q8_0[2,32]);")
    assert "moe (as its expert stacks)" in message
    # Blocks along the last axis: gate's H must hold whole q4_k blocks (at the weight).
    bad = _block(node.replace("256]", "128]"), "f32[2,128]",
                 gate="q4_k[4,32,128]", up="f32[4,32,128]", down="f32[4,128,32]")  # fmt: skip
    assert _diagnostics(bad) == [
        (
            "4:10: weight '%gate' q4_k[4,32,128]: the last dimension (128) must be a multiple of "
            "the q4_k block (256 elements, 144 bytes)"
        )
    ]


def _cost(text: str, name: str = "y") -> tuple[int, int]:
    graph = og.parse(text)
    og.verify(graph)
    types = graph.value_types()
    node = next(n for n in graph.nodes if n.name == name)
    c = cost(node, [types[o] for o in node.operands], types[name])
    return c.bytes, c.flops


def test_cost_counts_the_selected_experts_not_all() -> None:
    """A decode token reads k of E experts; a prefill of many tokens reads them all."""
    node = "%y = moe(%x, %logits, %gate, %up, %down) {{k = 2}} : f32[{t},64]"
    stacks = {"gate": "f32[16,32,64]", "up": "f32[16,32,64]", "down": "f32[16,64,32]"}
    expert = 3 * 32 * 64 * 4  # one expert's three f32 matrices
    one = _cost(_block(node.format(t=1), "f32[1,64]", "f32[1,16]", **stacks))
    assert one[0] == 2 * expert + (64 + 16 + 64) * 4
    assert one[1] == 2 * (6 * 64 * 32 + 8 * 32 + 2 * 64) + 6 * 16
    many = _cost(_block(node.format(t=12), "f32[12,64]", "f32[12,16]", **stacks))
    assert many[0] == 16 * expert + 12 * (64 + 16 + 64) * 4  # min(E, T·k) = 16 experts
    assert many[1] == 12 * one[1]
    # Quantized stacks count their stored bytes.
    quantized = {"gate": "q8_0[16,32,64]", "up": "q8_0[16,32,64]", "down": "q8_0[16,64,32]"}
    q = _cost(_block(node.format(t=1), "f32[1,64]", "f32[1,16]", **quantized))
    assert q[0] == 2 * 3 * 32 * 64 // 32 * 34 + (64 + 16 + 64) * 4


@pytest.mark.parametrize(
    ("attrs", "stacks", "message"),
    [
        ("experts = [2, 5], k = 2", {},
         "experts = [2, 5] must be lo < hi within the 4 experts of logits f32[2,4]"),
        ("experts = [3, 3], k = 1", {},
         "experts = [3, 3] must be lo < hi within the 4 experts of logits f32[2,4]"),
        ("experts = [1, 2, 3], k = 1", {}, "experts must be [lo, hi], got [1, 2, 3]"),
        ("experts = [1, 3], k = 2", {}, "gate f32[4,32,64] differs from [hi-lo,F,H] = [2,32,64]"),
        ("experts = [1, 3], k = 2", {"gate": "f32[2,32,64]", "up": "f32[2,32,64]"},
         "down f32[4,64,32] differs from [hi-lo,H,F] = [2,64,32]"),
    ],
)  # fmt: skip
def test_experts_attribute_errors(attrs: str, stacks: dict[str, str], message: str) -> None:
    node = f"%y = moe(%x, %logits, %gate, %up, %down) {{{attrs}}} : f32[2,64]"
    assert _diagnostics(_block(node, **stacks)) == [f"7:8: moe: {message}"]


def test_a_part_holds_hi_minus_lo_experts_and_k_counts_all_of_them() -> None:
    """The stacks of `experts = [1, 3]` hold 2 experts; k may exceed them (routing is over E)."""
    node = "%y = moe(%x, %logits, %gate, %up, %down) {experts = [1, 3], k = 3} : f32[2,64]"
    part = {"gate": "f32[2,32,64]", "up": "f32[2,32,64]", "down": "f32[2,64,32]"}
    text = _block(node, **part)
    graph = og.parse(text)
    og.verify(graph)
    assert og.print_graph(graph) == text
    assert og.print_graph(parse_with_lark(text)) == text
    # Its cost: its stacks' bytes, and 2/4 of the products of the whole node.
    whole = _block(node.replace("experts = [1, 3], ", ""))
    part_cost, whole_cost = _cost(text), _cost(whole)
    assert part_cost[0] < whole_cost[0]
    routing = 2 * 6 * 4
    assert part_cost[1] - routing == (whole_cost[1] - routing) // 2
