"""The block layout and key chunks of the wide decode attention (`decode_wide`).

A key row is `LR = D·bytes/16` lanes of one 16-byte vector each (f16 D 128: 16 lanes), so 256
threads read `KPS = 256 / LR` keys with one load each: a *slot*.

Rows a block (`wide_layout`): where the K/V a step reads fit easily in L2 (at most
`L2_REREAD_BYTES`), one query row a block: a block's work per thread is a quarter of a 4-row
block's (a short chain of dependent instructions, the latency that bounds a decode attention)
and the group's rows read the same K/V from L2; larger caches keep up to `ROWS` rows a block, so
that K/V leave DRAM once per group.

Chunks, with S = ⌈Skv / KPS⌉ slots per head and `base` = B · Hkv · row tiles: C = 1 when
S ≤ MAX_SLOTS (one pass: merging chunks would cost more than the parallelism buys), else
C = max(1, min(⌊target / base⌋, ⌈S / MAX_SLOTS⌉, MAX_CHUNKS)), each chunk of at least MAX_SLOTS
slots, the slots spread evenly. `target`: two blocks a multiprocessor with one row a block
(`TARGET_BLOCKS`), one with several (such a block takes over 128 registers a thread: a second
would leave a wave). Examples (f16): 32/8 heads, D 128, Skv 1024 (4 MiB of K/V) -> KPS 16, S 64,
1 row a block, C 8, two passes of 4 slots, 256 blocks; 8/2 heads, D 64, Skv 128 -> KPS 32, S 4,
C 1, 8 blocks.

Complexity: O(1) a shape.
"""

from __future__ import annotations

from dataclasses import dataclass

from optgraph.codegen.kernels.attention.head_rows import ELEMENT_BYTES, AttentionShape

THREADS = 256
WARPS = THREADS // 32
VECTOR = 16  # bytes a lane loads of a row
MAX_SLOTS = 4  # key slots a thread has in flight (K and V: 2 x 16 bytes each)
TARGET_BLOCKS = 264  # blocks of one row each: two a multiprocessor (H100: 132)
MAX_CHUNKS = 32
MAX_SQ = 4
MAX_ROWS = 16  # query rows per KV head (group x Sq)
ROWS = 8  # rows per block, at most, where K/V exceed L2_REREAD_BYTES (fewer for wide heads)
L2_REREAD_BYTES = 16 << 20  # K/V bytes a step reads, at most, for one query row a block
SHARED_ACC = 32768  # bytes of the warps' accumulators in shared memory, at most


@dataclass(frozen=True)
class WideLayout:
    """`lr` lanes a key row of `e` elements each, `kps` keys a slot; `rb` query rows a block of
    `rt` row tiles; `chunks` chunks of `chunk_keys` keys, walked in `passes` passes of `slots`
    slots."""

    lr: int
    e: int
    kps: int
    rb: int
    rt: int
    chunks: int
    chunk_keys: int
    slots: int
    passes: int


def _lanes(shape: AttentionShape) -> int:
    """Lanes of a key row (one 16-byte vector each); 0 where the row is no such split."""
    size = ELEMENT_BYTES.get(shape.dtype, 0)
    if not size or (shape.d * size) % VECTOR:
        return 0
    lr = shape.d * size // VECTOR
    return lr if lr <= 32 and lr & (lr - 1) == 0 else 0


def fits(shape: AttentionShape) -> bool:
    rows = shape.group * shape.sq
    return _lanes(shape) > 0 and shape.sq <= MAX_SQ and rows <= MAX_ROWS and shape.skv > 0


def wide_layout(shape: AttentionShape) -> WideLayout:
    """The block layout and chunking of `shape` (the rule is the module docstring's)."""
    lr = _lanes(shape)
    e = shape.d // lr
    kps = THREADS // lr
    rows = shape.group * shape.sq
    kv_bytes = 2 * shape.b * shape.hkv * shape.skv * shape.d * ELEMENT_BYTES[shape.dtype]
    most = 1 if kv_bytes <= L2_REREAD_BYTES else ROWS
    rb = min(rows, most, max(1, SHARED_ACC // (WARPS * shape.d * 4)))
    rt = -(-rows // rb)
    total = -(-shape.skv // kps)
    base = shape.b * shape.hkv * rt
    target = TARGET_BLOCKS if rb == 1 else TARGET_BLOCKS // 2
    chunks = 1
    if total > MAX_SLOTS:
        chunks = max(1, min(target // base, -(-total // MAX_SLOTS), MAX_CHUNKS))
    per_chunk = -(-total // chunks)
    chunks = -(-total // per_chunk)
    # two slots a pass when the rows' q and accumulators already take many registers
    most = MAX_SLOTS if rb * e <= 32 else MAX_SLOTS // 2
    slots = min(most, per_chunk)
    return WideLayout(lr, e, kps, rb, rt, chunks, per_chunk * kps, slots, -(-per_chunk // slots))
