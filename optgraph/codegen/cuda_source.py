"""The shared vocabulary of CUDA code generation: kernels, launches, dtypes and indexing in C.

Every op family (`cuda_dispatch` lists them) builds its work from these pieces: a `Kernel` (one
`extern "C" __global__` function), a `Launch` of it with buffers named by *role* (`"out"`, `"in0"`,
`"in1"`, ...) and a `DeviceCopy` (a memcpy); `lower_cuda` binds roles to arena offsets.

Every shape, stride and attribute is baked into the source as a constant, and a kernel's name is a
hash of its text, so identical ops (same op, attributes, operand and result types) produce
byte-identical kernels that the runtime compiles once:

    %a = exp(%x) : f32[4,64]   and   %b = exp(%y) : f32[4,64]   ->  the same `og_exp_<hash>`

Numerics: f16 and bf16 are stored as 16-bit integers and converted with PTX `cvt` (f16) or bit
arithmetic (bf16, round to nearest even), so no CUDA header is needed; all float work is done in
float32, like the reference interpreter; reductions accumulate in float32 (integers in their own
type). Kernels never assume `__restrict__`: planned in-place ops make `out` alias `in0`.
"""

from __future__ import annotations

import functools
import hashlib
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from optgraph.codegen.cuda_prelude import PRELUDE
from optgraph.errors import OptGraphError
from optgraph.ir import op_cuda
from optgraph.ir.graph import FLOAT_DTYPES


class CodegenError(OptGraphError):
    """A node the CUDA code generator cannot emit (an unsupported op or region)."""


@dataclass(frozen=True)
class Kernel:
    """One `extern "C" __global__` function: its name (a hash of the text) and its text.

    `source` is the standalone text: the file-scope declarations `decls` (split-K workspaces,
    a merged kernel's member functions), then the function. Kernels assembled from parts
    (`make_kernel`, `Kernel.assemble`) also keep `params` (C parameter declarations, every one
    a device pointer) and `body` (the function body without the PDL entry): what
    `merged_kernel` needs to call the body as a device function of a merged launch. A kernel
    without parts (None) is never merged. `bounds` (threads a block, blocks a multiprocessor)
    is its `__launch_bounds__`, None for none (a merged launch keeps its members'). `early`:
    statements run before the PDL dependency wait, so during the preceding kernel: only hints
    (L2 prefetches of weights), self-contained (a block of its own), never a store.
    `self_wait`: the body issues the PDL entry itself (`PDL_ENTRY`, after loading weights that no
    kernel writes into registers: `product_kernel.EARLY_WEIGHTS`), so the template does not.
    """

    name: str
    source: str
    params: tuple[str, ...] | None = None
    body: str | None = None
    decls: tuple[str, ...] = ()
    bounds: tuple[int, int] | None = None
    early: str = ""
    self_wait: bool = False

    @classmethod
    def assemble(
        cls,
        name: str,
        params: Iterable[str],
        body: str,
        decls: Iterable[str] = (),
        bounds: tuple[int, int] | None = None,
        early: str = "",
        self_wait: bool = False,
    ) -> Kernel:
        """The kernel `name` from its parts: `decls` (empty ones dropped), then the function."""
        params, decls = tuple(params), tuple(d for d in decls if d)
        function = kernel_template(params, body, bounds, early, self_wait)
        function = function.replace("KERNEL_NAME", name)
        source = "".join(decls) + function
        return cls(name, source, params, body.rstrip(), decls, bounds, early, self_wait)

    @property
    def function(self) -> str:
        """The `extern "C"` function alone (`source` without `decls`)."""
        head = "".join(self.decls)
        assert self.source.startswith(head), self.name
        return self.source[len(head) :]

    @property
    def shared_bytes(self) -> int | None:
        """Static shared memory its body declares (an upper bound), None where not known."""
        return None if self.body is None else static_shared_bytes(self.body)


@dataclass(frozen=True)
class Launch:
    """Launch `kernel` with the buffers of `args` (roles: "out", "in0", ...) in order."""

    kernel: Kernel
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[str, ...]
    shared_mem: int = 0


@dataclass(frozen=True)
class DeviceCopy:
    """memcpy `nbytes` from role `src` (+ `src_offset` bytes) to role `dst` (+ `dst_offset`)."""

    dst: str
    src: str
    nbytes: int
    dst_offset: int = 0
    src_offset: int = 0


# -- dtypes --------------------------------------------------------------------------------------

# The C type of each dtype's compute value, and exact float literals: defined in `ir/op_cuda.py`,
# the vocabulary the elementwise ops' declarations are written in.
COMPUTE: dict[str, str] = op_cuda.COMPUTE
f32_literal = op_cuda.f32_literal
STORAGE: dict[str, str] = {
    "f32": "float",
    "f16": "og_f16",
    "bf16": "og_bf16",
    "i32": "int",
    "i64": "long long",
    "bool": "unsigned char",
}
# Raw-bit types by element size, for copies that do not look at values.
BITS: dict[int, str] = {
    1: "unsigned char",
    2: "unsigned short",
    4: "unsigned int",
    8: "unsigned long long",
}


def load(dtype: str, expr: str) -> str:
    """A C expression reading storage `expr` of `dtype` as its compute type."""
    if dtype == "f16":
        return f"og_f16_to_f32({expr})"
    if dtype == "bf16":
        return f"og_bf16_to_f32({expr})"
    if dtype == "bool":
        return f"({expr} != 0)"
    return expr


def store(dtype: str, expr: str) -> str:
    """A C expression converting compute value `expr` to the storage type of `dtype`."""
    if dtype == "f16":
        return f"og_f32_to_f16((float)({expr}))"
    if dtype == "bf16":
        return f"og_f32_to_bf16((float)({expr}))"
    if dtype == "bool":
        return f"(unsigned char)(({expr}) != 0)"
    return f"({STORAGE[dtype]})({expr})"


def f64_literal(value: float) -> str:
    return (
        repr(float(value)) if math.isfinite(value) else ("HUGE_VAL" if value > 0 else "-HUGE_VAL")
    )


def index_type(count: int) -> str:
    """32-bit unsigned indices (fast division) unless a loop may pass 2^31."""
    return "unsigned int" if count < 2**31 else "unsigned long long"


def lowest(dtype: str) -> str:
    """The identity of max in the compute type of `dtype`."""
    if dtype in FLOAT_DTYPES:
        return "(-__int_as_float(0x7f800000))"
    if dtype == "i32":
        return "(-2147483647 - 1)"
    return "(-9223372036854775807LL - 1)"


# -- indexing ------------------------------------------------------------------------------------


def strides(shape: Sequence[int]) -> list[int]:
    """Row-major element strides."""
    out = [1] * len(shape)
    for d in range(len(shape) - 2, -1, -1):
        out[d] = out[d + 1] * shape[d + 1]
    return out


def gather_offset(index: str, out_shape: Sequence[int], src_strides: Sequence[int]) -> str:
    """C expression: the source offset of the element at linear `index` of `out_shape`, where
    moving one step along output dim d moves `src_strides[d]` elements in the source."""
    out_strides = strides(out_shape)
    terms = []
    for d, (size, step) in enumerate(zip(out_shape, src_strides)):
        if size == 1 or step == 0:
            continue
        coord = index if out_strides[d] == 1 else f"({index} / {out_strides[d]}u)"
        if d > 0 and any(s != 1 for s in out_shape[:d]):
            coord = f"({coord} % {size}u)"
        terms.append(coord if step == 1 else f"{coord} * {step}u")
    return " + ".join(terms) if terms else "0"


def broadcast_offset(index: str, shape: Sequence[int], target: Sequence[int]) -> str:
    """C expression: offset in a tensor of `shape` read at linear `index` of broadcast `target`."""
    if tuple(shape) == tuple(target):
        return index
    if math.prod(shape) == 1:
        return "0"
    pad = len(target) - len(shape)
    own = strides(shape)
    src = [0] * pad + [0 if shape[d] == 1 else own[d] for d in range(len(shape))]
    return gather_offset(index, target, src)


def grid_1d(count: int, block: int = 256) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """(grid, block) for a grid-stride loop over `count` elements."""
    blocks = max(1, min(-(-count // block), 65536))
    return (blocks, 1, 1), (block, 1, 1)


def block_size(cols: int) -> int:
    """Threads for a block that reduces `cols` elements: a multiple of 32, at most 256."""
    threads = 32
    while threads < cols and threads < 256:
        threads *= 2
    return threads


# -- kernels -------------------------------------------------------------------------------------


def make_kernel(
    family: str, params: Iterable[str], body: str, threads: int | None = None
) -> Kernel:
    """A kernel named `og_<family>_<12 hex digits of the text's SHA-1>`.

    `params` are C parameter declarations; `body` the function body (without braces);
    `threads`: the block size it is always launched with, where that is more than
    `UNBOUNDED_THREADS`: the kernel then declares `__launch_bounds__(threads, 1)`, so the
    compiler keeps its registers within what such a block may have (without it a body that
    needs more fails to launch: CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES).
    """
    params = tuple(params)
    bounds = (threads, 1) if threads is not None and threads > UNBOUNDED_THREADS else None
    template = kernel_template(params, body, bounds)
    digest = hashlib.sha1(f"{family}\n{template}".encode()).hexdigest()[:12]
    return Kernel.assemble(f"og_{family}_{digest}", params, body, bounds=bounds)


# Blocks of at most this many threads may use up to 255 registers a thread (64 Ki registers a
# multiprocessor); larger ones need their bounds declared.
UNBOUNDED_THREADS = 256


WAIT = "og_grid_dependency_wait();"
LAUNCH_DEPENDENTS = "og_grid_launch_dependents();"
PDL_ENTRY = f"  {WAIT}\n  {LAUNCH_DEPENDENTS}\n"


def body_entry(trigger: bool = True) -> str:
    """The PDL statements a self-waiting body (or a merged kernel's member) runs at its wait:
    the wait, then the trigger. `trigger` False: the wait alone; the body then runs
    `LAUNCH_DEPENDENTS` itself, later (a one-row product after its product loop:
    `product_kernel.LATE_TRIGGER_BYTES`)."""
    return WAIT + (f"\n{LAUNCH_DEPENDENTS}" if trigger else "")


def kernel_template(
    params: Iterable[str],
    body: str,
    bounds: tuple[int, int] | None = None,
    early: str = "",
    self_wait: bool = False,
) -> str:
    """The text of one kernel named `KERNEL_NAME`: every generated kernel is assembled here.

    Its first statements are the Programmatic Dependent Launch entry (`PDL_ENTRY`): wait for the
    preceding grid (its completion and memory), then let the next grid start launching. They
    come before any global memory access; on archs before sm_90 and in the CPU emulator they
    are empty (see `PRELUDE`). `bounds` = (threads, blocks) adds `__launch_bounds__(threads,
    blocks)`: ptxas then budgets registers for that many blocks a multiprocessor instead of
    full occupancy (which can leave only one load in flight per thread). `early` statements come
    before the PDL entry (see `Kernel.early`); `self_wait`: the body has the entry (see
    `Kernel.self_wait`).
    """
    signature = ", ".join(params)
    head = f"__launch_bounds__({bounds[0]}, {bounds[1]}) " if bounds else ""
    lead = early.rstrip() + "\n" if early.strip() else ""
    entry = "" if self_wait else PDL_ENTRY
    return (
        f'extern "C" __global__ void {head}KERNEL_NAME({signature}) {{\n'
        f"{lead}{entry}{body.rstrip()}\n}}\n"
    )


def out_param(dtype: str) -> str:
    return f"{STORAGE[dtype]}* out"


def in_param(dtype: str, i: int) -> str:
    return f"const {STORAGE[dtype]}* in{i}"


def kernels_source(kernels: Iterable[Kernel]) -> str:
    """Each distinct kernel once, sorted by name (so the text is deterministic), each file-scope
    declaration once: a workspace or member function shared by a kernel and a merged kernel that
    contains it is defined once (a second `__device__` definition would not compile)."""
    return "".join(text for _, text in _kernel_parts(kernels))


def _kernel_parts(kernels: Iterable[Kernel]) -> list[tuple[str, str]]:
    """`kernels_source`'s pieces in order, each with the kernel it was written for (a shared
    declaration: the first kernel, in name order, that needs it)."""
    unique = {k.name: k for k in kernels}
    seen: set[str] = set()
    parts: list[tuple[str, str]] = []
    for name in sorted(unique):
        kernel = unique[name]
        for decl in kernel.decls:
            if decl not in seen:
                seen.add(decl)
                parts.append((name, "\n" + decl))
        parts.append((name, "\n" + kernel.function))
    return parts


def module_source(kernels: Iterable[Kernel]) -> str:
    """The prelude and `kernels_source(kernels)`."""
    return PRELUDE + kernels_source(kernels)


def kernel_at_line(kernels: Iterable[Kernel], line: int) -> str | None:
    """The kernel whose text (its function, or a declaration written for it) holds 1-based
    `line` of `module_source(kernels)`; None for the prelude or past the end. What a compiler's
    `file(line): error` names, in the plan's terms."""
    start = PRELUDE.count("\n") + 1  # the line the first piece begins on
    for name, text in _kernel_parts(kernels):
        end = start + text.count("\n")
        if start <= line <= end:
            return name
        start = end
    return None


# Bytes of the element types a `__shared__` declaration of ours uses.
_SHARED_TYPES = {
    "bool": 1, "char": 1, "unsigned char": 1, "short": 2, "unsigned short": 2, "og_f16": 2,
    "og_bf16": 2, "int": 4, "unsigned int": 4, "float": 4, "long long": 8,
    "unsigned long long": 8, "double": 8, "float2": 8, "float4": 16, "uint4": 16,
}  # fmt: skip
_SHARED_DECL = re.compile(r"__shared__\s+([^;{}]*);")
_DECLARATOR = re.compile(r"\s*[A-Za-z_]\w*((?:\[\d+\])*)\s*")


@functools.lru_cache(maxsize=4096)  # asked for each launch's kernel; a plan repeats its kernels
def static_shared_bytes(body: str) -> int | None:
    """An upper bound of the static shared memory `body` declares (each array rounded up to 16
    bytes for alignment), or None where a `__shared__` declaration is not of the plain forms the
    code generators write (`__shared__ T a[2][3], b;`, optionally `alignas(16)` before): such a
    kernel is never merged. Dynamic (`extern __shared__`) memory is None as well."""
    total, found = 0, 0
    for match in _SHARED_DECL.finditer(body):
        words = match[1].split()
        # the longest known element type the statement starts with, then its declarators
        cut = next((n for n in (3, 2, 1) if " ".join(words[:n]) in _SHARED_TYPES), None)
        if cut is None:
            return None
        size = _SHARED_TYPES[" ".join(words[:cut])]
        for declarator in " ".join(words[cut:]).split(","):
            dims = _DECLARATOR.fullmatch(declarator)
            if dims is None:
                return None
            count = math.prod(int(d) for d in re.findall(r"\d+", dims[1]))
            total += -(-size * count // 16) * 16
        found += 1
    if found != body.count("__shared__") or "extern __shared__" in body:
        return None
    return total
