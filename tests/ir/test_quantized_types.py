"""Quantized weight types: ggml's block formats as dtypes, their stored bytes, who may read them."""

from __future__ import annotations

import pytest

import optgraph as og
from optgraph.errors import VerifyError
from optgraph.ir.graph import QUANT_BLOCKS, QUANT_DTYPES, TensorType
from optgraph.ir.line_parser import parse_lines
from optgraph.ir.parser import parse_with_lark

DECODE = """graph decode {
  input %x : f32[2,256]
  input %ids : i32[3]
  weight %w : q4_k[16,256]
  weight %emb : q8_0[10,64]
  weight %d : q5_0[4,32]
  %y = matmul(%x, %w) {transpose_b = true} : f32[2,16]
  %e = get_rows(%emb, %ids) : f32[3,64]
  %f = dequantize(%d) {dtype = "bf16"} : bf16[4,32]
  output %y, %e, %f
}
"""


def diagnostics(text: str) -> list[str]:
    with pytest.raises(VerifyError) as info:
        og.verify(og.parse(text))
    out = []
    for d in info.value.diagnostics:
        assert d.span is not None, d.message
        out.append(f"{d.span.line}:{d.span.col}: {d.message}")
    return out


def graph(*lines: str) -> str:
    body = "".join(f"  {line}\n" for line in lines)
    return f"graph g {{\n  input %x : f32[2,64]\n{body}  output %y\n}}\n"


def test_the_block_table_holds_the_types_of_the_files_people_run() -> None:
    """Q8_0, Q4_0 and the k-quants of Q4_K_M/Q5_K_M files, and gpt-oss's MXFP4 (their sizes:
    the gguf package's, next test)."""
    wanted = {"q8_0", "q4_0", "q4_1", "q5_0", "q4_k", "q5_k", "q6_k", "mxfp4"}
    assert set(QUANT_BLOCKS) == wanted and QUANT_DTYPES == tuple(QUANT_BLOCKS)


def test_the_block_table_matches_the_gguf_package() -> None:
    gguf = pytest.importorskip("gguf")
    for dtype, block in QUANT_BLOCKS.items():
        kind = gguf.GGMLQuantizationType[dtype.upper()]
        assert gguf.GGML_QUANT_SIZES[kind] == block, dtype


@pytest.mark.parametrize("dtype", QUANT_DTYPES)
def test_nbytes_counts_stored_blocks(dtype: str) -> None:
    elems, size = QUANT_BLOCKS[dtype]
    t = TensorType(dtype, (3, 4 * elems))
    assert t.is_quantized
    assert t.array_shape == (3, 4 * size)
    assert t.nbytes == 3 * 4 * size
    assert TensorType(dtype, (2, 5, elems)).nbytes == 10 * size


def test_plain_types_are_unchanged() -> None:
    t = TensorType("f16", (3, 64))
    assert not t.is_quantized and t.array_shape == (3, 64) and t.nbytes == 384


def test_quantized_weights_round_trip_through_both_parsers() -> None:
    g = og.parse(DECODE)
    og.verify(g)
    assert og.print_graph(g) == DECODE
    fast = parse_lines("<q>", DECODE.split("\n"))
    assert fast is not None and fast == parse_with_lark(DECODE) == g
    assert [w.type.nbytes for w in g.weights] == [16 * 144, 10 * 2 * 34, 4 * 22]


def test_every_quantized_dtype_parses() -> None:
    for dtype in QUANT_DTYPES:
        elems = QUANT_BLOCKS[dtype][0]
        text = DECODE.replace("q5_0[4,32]", f"{dtype}[4,{elems}]").replace(
            "bf16[4,32]", f"bf16[4,{elems}]"
        )
        og.verify(og.parse(text))


def test_a_misspelt_quantized_dtype_gets_a_suggestion() -> None:
    with pytest.raises(og.OptGraphError, match=r"unknown dtype 'q4k'.*did you mean 'q4_k'"):
        og.parse(DECODE.replace("q4_k", "q4k"))


def test_last_dimension_must_hold_whole_blocks() -> None:
    text = graph(
        "weight %w : q4_k[16,64]",
        "weight %s : q8_0[]",
        "%y = neg(%x) : f32[2,64]",
    )
    assert diagnostics(text) == [
        (
            "3:10: weight '%w' q4_k[16,64]: the last dimension (64) must be a multiple of the q4_k "
            "block (256 elements, 144 bytes)"
        ),
        "4:10: weight '%s' q8_0[]: a quantized weight needs an axis",
    ]


def test_quantized_inputs_and_results_are_refused() -> None:
    text = graph(
        "weight %w : q8_0[16,64]",
        "%c = copy(%x) : f32[2,64]",
        "%y = reshape(%c) {shape = [2,64]} : q8_0[2,64]",
    ).replace("input %x : f32[2,64]", "input %x : f32[2,64]\n  input %q : q4_0[2,32]")
    assert diagnostics(text) == [
        (
            "3:9: input '%q' q4_0[2,32]: a quantized type is only for weights (dequantize them to "
            "compute)"
        ),
        "6:8: reshape: declared type q8_0[2,64] but the operands give f32[2,64]",
        "6:8: '%y' q8_0[2,64]: a quantized type is only for weights (dequantize them to compute)",
    ]


def test_only_the_named_ops_read_quantized_values() -> None:
    allowed = (
        "only matmul (as b, [N,K] with transpose_b = true), get_rows (as the table), moe (as "
        "its expert stacks) and dequantize read quantized weights"
    )
    text = graph(
        "weight %w : q8_0[16,64]",
        "%a = add(%x, %w) : f32[16,64]",
        "%b = matmul(%w, %x) {transpose_b = true} : f32[16,2]",
        "%y = transpose(%w) {perm = [1,0]} : q8_0[64,16]",
    )
    assert diagnostics(text) == [
        f"4:16: add: operand '%w' is quantized (q8_0[16,64]); {allowed}",
        f"5:15: matmul: operand '%w' is quantized (q8_0[16,64]); {allowed}",
        f"6:18: transpose: operand '%w' is quantized (q8_0[16,64]); {allowed}",
        "6:8: '%y' q8_0[64,16]: a quantized type is only for weights (dequantize them to compute)",
    ]


def test_quantized_matmul_rules() -> None:
    text = graph(
        "weight %w : q8_0[16,64]",
        "weight %w3 : q8_0[2,16,64]",
        "input %i : i32[2,64]",
        "%a = matmul(%x, %w) : f32[2,16]",
        "%b = matmul(%i, %w) {transpose_b = true} : f32[2,16]",
        "%c = matmul(%x, %w3) {transpose_b = true} : f32[2,2,16]",
        "%y = matmul(%x, %w) {transpose_b = true} : f16[2,16]",
    )
    assert diagnostics(text) == [
        (
            "6:8: matmul: a quantized operand b (q8_0[16,64]) is [N,K] with blocks along K: set "
            "transpose_b = true"
        ),
        (
            "7:8: matmul: operand a must be f32, f16 or bf16 to multiply a quantized b, got "
            "i32[2,64]"
        ),
        "8:8: matmul: a quantized operand b must be [N,K], got q8_0[2,16,64]",
        "9:8: matmul: declared type f16[2,16] but the operands give f32[2,16]",
    ]


def test_quantized_matmul_keeps_the_activation_dtype() -> None:
    text = graph(
        "input %h : bf16[3,5,64]",
        "weight %w : q6_k[8,256]",
        "weight %v : q4_1[8,64]",
        "%y = matmul(%h, %v) {transpose_b = true} : bf16[3,5,8]",
    )
    og.verify(og.parse(text))


def test_dequantize_needs_a_quantized_operand() -> None:
    text = graph(
        "weight %w : q8_0[16,64]",
        "%a = dequantize(%x) : f32[2,64]",
        '%b = dequantize(%w) {dtype = "i32"} : i32[16,64]',
        "%y = dequantize(%w) : f32[16,64]",
    )
    found = diagnostics(text)
    assert found[0].startswith("4:8: dequantize: expected a quantized operand (q8_0, q4_0, ")
    assert found[0].endswith("got f32[2,64]")
    assert found[1].startswith("5:8: dequantize: attribute 'dtype' must be one of")


def test_a_quantized_weight_takes_no_layout() -> None:
    text = graph(
        'weight %w : q8_0[16,64] !{layout = "transposed"}',
        "%y = matmul(%x, %w) {transpose_b = true} : f32[2,16]",
    )
    assert diagnostics(text)[0] == (
        "3:10: weight '%w' q8_0[16,64]: a quantized weight takes no layout (its blocks run "
        "along the last axis as stored)"
    )
