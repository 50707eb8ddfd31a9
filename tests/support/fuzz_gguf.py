"""A tiny valid GGUF file written field by field, and hypothesis strategies that damage one field
of it at a time, knowing the format (tests/bad_input/test_fuzz_gguf.py).

    spec = tiny_llama()                       # a 1-layer llama, 32 wide, a SentencePiece vocab
    encoded = encode(spec)                    # bytes, each field's place, each section's end
    mutant = draw(gguf_mutants())             # (what was changed, the damaged file's bytes)

`encode` follows the GGUF specification (version 3, little-endian): the header (magic, version,
tensor count, metadata count), each key-value pair (a string key, a uint32 type, the value:
scalars, strings as a uint64 length and bytes, arrays as an element type, a uint64 count and the
elements), each tensor's info (name, dimension count, dimensions innermost first, ggml type,
offset into the data section), padding to the alignment, then the tensors' bytes. It records
where every integer field lies (`Encoded.fields`) and where every section ends
(`Encoded.boundaries`), so a mutant can overwrite exactly one count or length, or cut the file
at a section's end.
"""

from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from hypothesis import strategies as st

from tests.support.fuzz_checks import HUGE, Mutant

UINT8, INT8, UINT16, INT16, UINT32, INT32, FLOAT32, BOOL = range(8)
STRING, ARRAY, UINT64, INT64, FLOAT64 = range(8, 13)
CODES = {
    UINT8: "B", INT8: "b", UINT16: "H", INT16: "h", UINT32: "I", INT32: "i", FLOAT32: "f",
    BOOL: "?", UINT64: "Q", INT64: "q", FLOAT64: "d",
}  # fmt: skip
F32, F16, Q8_0, Q4_0, Q4_K, BF16 = 0, 1, 8, 2, 12, 30
BLOCKS = {F32: (1, 4), F16: (1, 2), Q8_0: (32, 34), Q4_0: (32, 18), Q4_K: (256, 144), BF16: (1, 2)}


@dataclass(frozen=True)
class Value:
    kind: int
    value: Any
    item: int | None = None  # an array's element type


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]  # row-major: the file stores it innermost first
    kind: int
    data: bytes = field(repr=False)
    offset: int | None = None  # None: laid out after the previous tensor, aligned


@dataclass(frozen=True)
class GGUFSpec:
    metadata: tuple[tuple[str, Value], ...] = field(repr=False)
    tensors: tuple[Tensor, ...] = field(repr=False)
    alignment: int = 32  # where `encode` puts the data; the key in `metadata` may say otherwise
    version: int = 3
    magic: bytes = b"GGUF"


@dataclass
class Encoded:
    data: bytes = field(repr=False)
    fields: dict[str, tuple[int, str]] = field(default_factory=dict, repr=False)  # -> (at, code)
    boundaries: dict[str, int] = field(default_factory=dict, repr=False)  # section -> its end


HIDDEN, HEADS, KV_HEADS, FFN, VOCAB = 32, 2, 1, 32, 12
TOKENS = ["<unk>", "<s>", "</s>", "\u2581", "a", "b", "c", "\u2581a", "ab", "\u2581ab", "ba", "bc"]
TOKEN_TYPES = [2, 3, 3] + [1] * (len(TOKENS) - 3)


def _floats(rng: np.random.Generator, shape: tuple[int, ...], kind: int) -> bytes:
    values = rng.standard_normal(shape).astype(np.float32) * 0.2
    return (values if kind == F32 else values.astype(np.float16)).tobytes()


def _q8_0(rng: np.random.Generator, shape: tuple[int, ...]) -> bytes:
    blocks = math.prod(shape) // 32
    out = bytearray()
    for _ in range(blocks):
        out += np.float16(0.01).tobytes() + rng.integers(-127, 128, 32, dtype=np.int8).tobytes()
    return bytes(out)


def tiny_llama() -> GGUFSpec:
    """A valid 1-layer `llama` file: hidden 32, 2 heads (1 kv head), an F16 and a Q8_0 matrix,
    a 12-token SentencePiece vocabulary, a UINT8 array, `general.alignment` 32."""
    rng = np.random.default_rng(0)
    metadata: list[tuple[str, Value]] = [
        ("general.architecture", Value(STRING, "llama")),
        ("general.alignment", Value(UINT32, 32)),
        ("llama.context_length", Value(UINT32, 64)),
        ("llama.embedding_length", Value(UINT32, HIDDEN)),
        ("llama.block_count", Value(UINT32, 1)),
        ("llama.feed_forward_length", Value(UINT32, FFN)),
        ("llama.attention.head_count", Value(UINT32, HEADS)),
        ("llama.attention.head_count_kv", Value(UINT32, KV_HEADS)),
        ("llama.attention.layer_norm_rms_epsilon", Value(FLOAT32, 1e-5)),
        ("llama.rope.freq_base", Value(FLOAT32, 10000.0)),
        ("tokenizer.ggml.model", Value(STRING, "llama")),
        ("tokenizer.ggml.tokens", Value(ARRAY, TOKENS, STRING)),
        ("tokenizer.ggml.scores", Value(ARRAY, [-float(i) for i in range(VOCAB)], FLOAT32)),
        ("tokenizer.ggml.token_type", Value(ARRAY, TOKEN_TYPES, INT32)),
        ("tokenizer.ggml.bos_token_id", Value(UINT32, 1)),
        ("tokenizer.ggml.eos_token_id", Value(UINT32, 2)),
        ("tokenizer.ggml.precompiled_charsmap", Value(ARRAY, [0] * 8, UINT8)),  # bytes, unread
    ]
    kv_dim = KV_HEADS * HIDDEN // HEADS
    shapes = {
        "token_embd.weight": ((VOCAB, HIDDEN), F32),
        "output_norm.weight": ((HIDDEN,), F32),
        "blk.0.attn_norm.weight": ((HIDDEN,), F32),
        "blk.0.attn_q.weight": ((HIDDEN, HIDDEN), F16),
        "blk.0.attn_k.weight": ((kv_dim, HIDDEN), F32),
        "blk.0.attn_v.weight": ((kv_dim, HIDDEN), F32),
        "blk.0.attn_output.weight": ((HIDDEN, HIDDEN), F32),
        "blk.0.ffn_norm.weight": ((HIDDEN,), F32),
        "blk.0.ffn_gate.weight": ((FFN, HIDDEN), Q8_0),
        "blk.0.ffn_up.weight": ((FFN, HIDDEN), F32),
        "blk.0.ffn_down.weight": ((HIDDEN, FFN), F32),
    }
    tensors = tuple(
        Tensor(name, shape, kind, _q8_0(rng, shape) if kind == Q8_0 else _floats(rng, shape, kind))
        for name, (shape, kind) in shapes.items()
    )
    return GGUFSpec(tuple(metadata), tensors)


class _Writer:
    def __init__(self) -> None:
        self.out = bytearray()
        self.fields: dict[str, tuple[int, str]] = {}

    def number(self, code: str, value: Any, name: str | None = None) -> None:
        if name is not None:
            self.fields[name] = (len(self.out), code)
        self.out += struct.pack("<" + code, value)

    def string(self, text: str, name: str) -> None:
        raw = text.encode("utf-8")
        self.number("Q", len(raw), name)
        self.out += raw

    def value(self, value: Value, name: str) -> None:
        if value.kind == STRING:
            self.string(value.value, f"{name}.len")
        elif value.kind == ARRAY:
            assert value.item is not None
            self.number("I", value.item, f"{name}.item_type")
            self.number("Q", len(value.value), f"{name}.count")
            if value.item in CODES:  # numbers: packed at once (a test writes millions)
                self.out += struct.pack(f"<{len(value.value)}{CODES[value.item]}", *value.value)
                return
            for index, item in enumerate(value.value):
                element = item if isinstance(item, Value) else Value(value.item, item)
                self.value(element, f"{name}[{index}]")
        else:
            self.number(CODES[value.kind], value.value)


def encode(spec: GGUFSpec) -> Encoded:
    """The file `spec` describes (module docstring)."""
    w = _Writer()
    w.out += spec.magic
    w.fields["magic"] = (0, "I")
    w.number("I", spec.version, "version")
    w.number("Q", len(spec.tensors), "tensor_count")
    w.number("Q", len(spec.metadata), "kv_count")
    boundaries = {"header": len(w.out)}
    for index, (key, value) in enumerate(spec.metadata):
        w.string(key, f"kv{index}.key_len")
        w.number("I", value.kind, f"kv{index}.type")
        w.value(value, f"kv{index}")
        boundaries[f"kv{index}"] = len(w.out)
    offsets, at = [], 0
    for tensor in spec.tensors:
        at = -(-at // spec.alignment) * spec.alignment
        offsets.append(at if tensor.offset is None else tensor.offset)
        at += len(tensor.data)
    for index, (tensor, offset) in enumerate(zip(spec.tensors, offsets)):
        w.string(tensor.name, f"tensor{index}.name_len")
        w.number("I", len(tensor.shape), f"tensor{index}.rank")
        for axis, dim in enumerate(reversed(tensor.shape)):
            w.number("Q", dim, f"tensor{index}.dim{axis}")
        w.number("I", tensor.kind, f"tensor{index}.type")
        w.number("Q", offset, f"tensor{index}.offset")
        boundaries[f"tensor_info{index}"] = len(w.out)
    start = -(-len(w.out) // spec.alignment) * spec.alignment
    w.out += bytes(start - len(w.out))
    boundaries["padding"] = start
    for index, (tensor, offset) in enumerate(zip(spec.tensors, offsets)):
        if tensor.offset is None:  # a tensor placed elsewhere brings no bytes of its own
            w.out += bytes(start + offset - len(w.out)) + tensor.data
            boundaries[f"data{index}"] = len(w.out)
    return Encoded(bytes(w.out), w.fields, boundaries)


# -- mutants -----------------------------------------------------------------------------------


def interesting(old: int, file_size: int, code: str) -> st.SearchStrategy[int]:
    """Values a damaged field takes: small, one off, the file's size, huge; fitting `code`."""
    bits = struct.calcsize(code) * 8
    limit = 2**bits if code.isupper() else 2 ** (bits - 1)
    values = [0, 1, 2, 3, old - 1, old + 1, old * 2, file_size, file_size - old, *HUGE]
    lowest = 0 if code.isupper() else -limit
    fitting = sorted({v for v in values if lowest <= v < limit and v != old})
    return st.sampled_from(fitting) | st.integers(lowest, limit - 1)


@st.composite
def field_overwritten(draw: st.DrawFn, base: Encoded) -> Mutant:
    """One integer field (a count, a length, a type, a dimension, an offset) set to another
    value, every other byte as it was."""
    name = draw(st.sampled_from(sorted(base.fields)))
    offset, code = base.fields[name]
    if name == "magic":
        raw = draw(st.sampled_from([b"GGUF"[::-1], b"GGML", b"\0\0\0\0", b"GGUf"]))
        return Mutant(f"magic {raw!r}", raw + base.data[4:])
    (old,) = struct.unpack_from("<" + code, base.data, offset)
    new = draw(interesting(int(old), len(base.data), code))
    data = bytearray(base.data)
    struct.pack_into("<" + code, data, offset, new)
    return Mutant(f"{name} {old} -> {new}", bytes(data))


@st.composite
def truncated(draw: st.DrawFn, base: Encoded) -> Mutant:
    """The file cut at a section's end (or a byte either side of it), or anywhere."""
    ends = sorted(set(base.boundaries.values()) - {len(base.data)})
    cut = draw(
        st.sampled_from(ends).flatmap(lambda end: st.sampled_from([end - 1, end, end + 1]))
        | st.integers(0, len(base.data) - 1)
    )
    return Mutant(f"cut at {cut}", base.data[:cut])


@st.composite
def bytes_flipped(draw: st.DrawFn, base: Encoded) -> Mutant:
    """A few bytes of the header (metadata and tensor infos) set at random."""
    data = bytearray(base.data)
    end = base.boundaries["padding"]
    places = draw(st.lists(st.integers(4, end - 1), min_size=1, max_size=4))
    for place in places:
        data[place] = draw(st.integers(0, 255))
    return Mutant(f"bytes at {places}", bytes(data))


# The metadata keys the importer and the tokenizer read, and values of the wrong kind for them.
WRONG_VALUES = (
    Value(STRING, "abc"),
    Value(STRING, ""),
    Value(FLOAT32, float("nan")),
    Value(FLOAT64, float("inf")),
    Value(FLOAT32, -1.5),
    Value(INT32, -1),
    Value(INT64, -(2**63)),
    Value(UINT64, 2**64 - 1),
    Value(UINT32, 0),
    Value(UINT32, 10**9),
    Value(BOOL, True),
    Value(ARRAY, [1, 2, 3], INT32),
    Value(ARRAY, [], UINT8),
    Value(ARRAY, ["x", "y"], STRING),
    Value(ARRAY, [Value(ARRAY, [1], INT32), Value(ARRAY, [2], INT32)], ARRAY),
)


def with_value(spec: GGUFSpec, key: str, value: Value | None) -> GGUFSpec:
    """`spec` with `key`'s value replaced (removed: None)."""
    if value is None:
        return replace(spec, metadata=tuple((k, v) for k, v in spec.metadata if k != key))
    return replace(spec, metadata=tuple((k, value if k == key else v) for k, v in spec.metadata))


@st.composite
def metadata_changed(draw: st.DrawFn, spec: GGUFSpec) -> tuple[str, GGUFSpec]:
    """One metadata value of another type or range, removed, or its key given twice."""
    keys = [k for k, _ in spec.metadata]
    key = draw(st.sampled_from(keys))
    how = draw(st.sampled_from(["value", "value", "value", "removed", "twice"]))
    if how == "removed":
        return f"{key} removed", with_value(spec, key, None)
    if how == "twice":
        old = dict(spec.metadata)[key]
        return f"{key} twice", replace(spec, metadata=(*spec.metadata, (key, old)))
    value = draw(st.sampled_from((*WRONG_VALUES, *PLAUSIBLE.get(key, ()))))
    return f"{key} = {value}", with_value(spec, key, value)


def _strings(*values: str) -> tuple[Value, ...]:
    return tuple(Value(STRING, v) for v in values)


def _numbers(kind: int, *values: float) -> tuple[Value, ...]:
    return tuple(Value(kind, v) for v in values)


# Keys the importer and the tokenizer read, with values of the right type that other files
# carry: another architecture (whose keys are then missing), rope scaling, experts, windows.
PLAUSIBLE: dict[str, tuple[Value, ...]] = {
    "general.architecture": _strings(
        "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "qwen3moe", "gpt-oss", "qwen2moe", "bert"
    ),
    "llama.rope.scaling.type": _strings("linear", "yarn", "llama3", "none", "x"),
    "llama.rope.scaling.factor": _numbers(FLOAT32, 0.0, -1.0, 4.0, float("nan")),
    "llama.rope.scaling.original_context_length": _numbers(UINT32, 0, 16, 2**32 - 1),
    "llama.rope.dimension_count": _numbers(UINT32, 0, 8, 16, 17),
    "llama.attention.key_length": _numbers(UINT32, 0, 8, 16, 10**9),
    "llama.attention.value_length": _numbers(UINT32, 8, 16),
    "llama.attention.sliding_window": _numbers(UINT32, 0, 4),
    "llama.expert_count": _numbers(UINT32, 0, 1, 4, 2**32 - 1),
    "llama.expert_used_count": _numbers(UINT32, 0, 2, 5),
    "llama.expert_feed_forward_length": _numbers(UINT32, 0, 32),
    "llama.expert_gating_func": _numbers(UINT32, 1, 2),
    "llama.expert_weights_norm": (Value(BOOL, False), Value(UINT8, 1)),
    "tokenizer.ggml.model": _strings("gpt2", "bert", "t5"),
    "tokenizer.ggml.pre": _strings("default", "llama-bpe", "qwen2", "unknown"),
    "tokenizer.ggml.merges": (
        Value(ARRAY, ["a b", "\u2581 a", "ab"], STRING),
        Value(ARRAY, ["x y"], STRING),
    ),
    "tokenizer.ggml.add_space_prefix": (Value(BOOL, False),),
    "tokenizer.ggml.add_eos_token": (Value(BOOL, True),),
    "tokenizer.ggml.unknown_token_id": _numbers(UINT32, 0, 11, 12, 2**32 - 1),
    "tokenizer.chat_template": _strings("{{ messages }}", "{% for %}"),
}


@st.composite
def metadata_added(draw: st.DrawFn, spec: GGUFSpec) -> tuple[str, GGUFSpec]:
    """One key of `PLAUSIBLE` the file lacks (or has) set to one of its values."""
    key = draw(st.sampled_from(sorted(PLAUSIBLE)))
    value = draw(st.sampled_from(PLAUSIBLE[key] + WRONG_VALUES[:4]))
    if key in dict(spec.metadata):
        return f"{key} = {value}", with_value(spec, key, value)
    return f"{key} = {value} added", replace(spec, metadata=(*spec.metadata, (key, value)))


@st.composite
def alignment_changed(draw: st.DrawFn, spec: GGUFSpec) -> tuple[str, GGUFSpec]:
    """`general.alignment` 0, not a power of two, huge, of another type, or a power of two the
    data is not laid out by (the layout follows it when `follow`)."""
    value = draw(
        st.sampled_from(
            [Value(UINT32, v) for v in (0, 1, 3, 48, 64, 4096, 2**31, 2**32 - 1)]
            + [Value(UINT64, 32), Value(STRING, "32"), Value(INT32, 32)]
        )
    )
    follow = value.kind == UINT32 and value.value in (1, 64, 4096) and draw(st.booleans())
    spec = with_value(spec, "general.alignment", value)
    return f"alignment {value} (followed {follow})", replace(
        spec, alignment=value.value if follow else spec.alignment
    )


@st.composite
def tensor_changed(draw: st.DrawFn, spec: GGUFSpec) -> tuple[str, GGUFSpec]:
    """One tensor's type, shape or offset damaged (its bytes as they were)."""
    index = draw(st.integers(0, len(spec.tensors) - 1))
    tensor = spec.tensors[index]
    what = draw(st.sampled_from(["type", "shape", "offset"]))
    if what == "type":
        kind = draw(st.sampled_from([3, 4, 5, 31, 99, 2**31, 2**32 - 1, *BLOCKS]))
        changed = replace(tensor, kind=kind)
    elif what == "shape":
        shape = draw(
            st.sampled_from(
                [(), (0,), (0, HIDDEN), (2**40, HIDDEN), (2**32, 2**32 + 1), (1, 1, 1, 1, 1),
                 (2**63, 2), (HIDDEN + 1,), (3, 7), tensor.shape[::-1], (*tensor.shape, 1)]
            )
        )  # fmt: skip
        changed = replace(tensor, shape=shape)
    else:
        others = [0, *(i * 32 for i in range(1, 8))]
        offset = draw(st.sampled_from([1, 31, 33, 2**40, 2**64 - 32, *others]))
        changed = replace(tensor, offset=offset)
    tensors = list(spec.tensors)
    tensors[index] = changed
    return f"{tensor.name} {what} -> {changed.shape, changed.kind, changed.offset}", replace(
        spec, tensors=tuple(tensors)
    )


def gguf_mutants(spec: GGUFSpec | None = None) -> st.SearchStrategy[Mutant]:
    """(what was damaged, the file's bytes): one structure-aware change to `spec` (default
    `tiny_llama()`), or the file itself unchanged."""
    spec = spec or tiny_llama()
    base = encode(spec)

    def encoded(change: tuple[str, GGUFSpec]) -> Mutant:
        return Mutant(change[0], encode(change[1]).data)

    semantic = st.one_of(
        metadata_changed(spec), metadata_added(spec), alignment_changed(spec), tensor_changed(spec)
    )
    return st.one_of(
        st.just(Mutant("unchanged", base.data)),
        field_overwritten(base),
        truncated(base),
        semantic.map(encoded),
        bytes_flipped(base),
    )
