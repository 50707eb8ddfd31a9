"""The data of a lowered CUDA plan: where values live, the steps the runtime issues, the plan.

`lower_cuda.lower_cuda` builds a `CudaPlan`; `merge_launches` rewrites its `KernelStep`s; the CUDA
runtime (`optgraph/runtime/cuda*.py`) binds, allocates and issues it. This module holds only the
data types they share, so that lowering, launch merging and the runtime import it and not each
other.

    Location("arena", "", 256)                 the 256th byte of the planned arena
    KernelStep("h", 0, "og_exp_1a2b", ...)     one launch of kernel og_exp_1a2b on stream 0
    EventStep("record", "e0", 1)               record ^e0 on stream 1
    DecodeRewrite("qkv_folds", "q", ...)       a decode rewrite lowering took (`CudaPlan.rewrites`)
    LaunchMerge("og_merged_3f1c", 0, ...)      a merged launch's members (`CudaPlan.merges`)
"""

from __future__ import annotations

from dataclasses import dataclass, field

from optgraph.codegen.cuda_source import Kernel, module_source
from optgraph.codegen.kernels.matmul import Gemm
from optgraph.ir.graph import TensorType


@dataclass(frozen=True)
class Location:
    """Where a value's first byte is: `space` ("arena", "weights", "input", "value"), `key` (the
    input or value name; "" for the shared buffers) and a byte offset."""

    space: str
    key: str
    offset: int

    def shifted(self, delta: int) -> Location:
        return Location(self.space, self.key, self.offset + delta)


@dataclass(frozen=True)
class Extent:
    """`size` bytes from `offset` of the buffer `space`/`key` (see `Location`)."""

    space: str
    key: str
    offset: int
    size: int

    @classmethod
    def of(cls, loc: Location, nbytes: int) -> Extent:
        """The `nbytes` bytes from `loc`."""
        return cls(loc.space, loc.key, loc.offset, nbytes)

    def overlaps(self, other: Extent) -> bool:
        return (
            self.space == other.space
            and self.key == other.key
            and self.offset < other.offset + other.size
            and other.offset < self.offset + self.size
        )


@dataclass(frozen=True)
class KernelStep:
    """One launch. `reads` / `writes`: the planned bytes it may read / write (operands; the
    result, a kv_cache_write in place its cache; weights are only read; a kernel's `__device__`
    workspace is its own), None where not known (such a step is never merged). A merged launch
    (`merge_launches`) lists its members' nodes in `nodes`, `node` being the first of them."""

    node: str
    stream: int
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_mem: int
    args: tuple[Location, ...]
    reads: tuple[Extent, ...] | None = None
    writes: tuple[Extent, ...] | None = None
    nodes: tuple[str, ...] = ()

    @property
    def members(self) -> tuple[str, ...]:
        """The nodes this launch computes: its merged members, else its own node."""
        return self.nodes or (self.node,)


@dataclass(frozen=True)
class GemmStep:
    node: str
    stream: int
    gemm: Gemm
    a: Location
    b: Location
    c: Location


@dataclass(frozen=True)
class CopyStep:
    node: str
    stream: int
    dst: Location
    src: Location
    nbytes: int
    kind: str = "d2d"  # "h2d", "d2h", "h2h" when a side is in a host space


@dataclass(frozen=True)
class HostStep:
    """A CPU node: the runtime evaluates it with NumPy in a host function on `stream`."""

    node: str
    stream: int
    index: int  # position in graph.nodes


@dataclass(frozen=True)
class EventStep:
    kind: str  # "record" or "wait"
    event: str
    stream: int


@dataclass(frozen=True)
class CollectiveStep:
    """One collective or point-to-point transfer between devices, issued on `stream` of this
    rank (`codegen/plan/collective_steps.py` makes them; the runtime issues them through NCCL).

    `kind`: "all_reduce", "all_gather", "send" or "recv". `group`: the participating devices
    in the node's order (send/recv: (from, to)); `rank` this device's index in `group`.
    `count`: elements this rank contributes (all_reduce: the whole tensor). `src`: this rank's
    operand (None for recv); `dst`: the result (None for send). `rows`: all_gather only, the
    product of the result's dimensions before `axis`: NCCL concatenates whole chunks, so with
    rows > 1 the runtime gathers into scratch and copies each rank's rows into place.
    `then_add`: all_reduce only, set by `codegen/decode/residual_adds.py`: (addend, out) where the next
    step is the elementwise `out = addend + result` (same type); a runtime that can do the add
    inside the reduction may, and then skips that step."""

    node: str
    stream: int
    kind: str
    group: tuple[int, ...]
    rank: int
    dtype: str
    count: int
    src: Location | None
    dst: Location | None
    rows: int = 1
    then_add: tuple[Location, Location] | None = None

    @property
    def peer(self) -> int:
        """send/recv: the other device (a global device id)."""
        return self.group[1 - self.rank]


Step = KernelStep | GemmStep | CopyStep | EventStep | HostStep | CollectiveStep
HOST_SPACES = frozenset({"host_arena", "host_weights"})


@dataclass(frozen=True)
class DecodeRewrite:
    """One decode rewrite lowering took (`codegen/decode/`): `rewrite` names it by its module
    ("qkv_folds", "rope_cache_writes", ...); `node` is the node whose launch does the work,
    `kernel` the kernel that launch runs before launch merging ("" for a collective); `nodes`
    are the other nodes involved: with `absorbs`, nodes that now issue nothing (that launch
    does their work), else nodes it reads or offers to do early; `note` says what was done,
    in a phrase.

        DecodeRewrite("rope_cache_writes", "k_rot", "og_rope_kv_1a2b", ("kc",),
                      "the rope stores its rows in %k_cache, in place")
    """

    rewrite: str
    node: str
    kernel: str
    nodes: tuple[str, ...]
    note: str
    absorbs: bool = True


@dataclass(frozen=True)
class LaunchMerge:
    """One merged launch (`merge_launches`): the kernel `kernel` on `stream` runs the members'
    launches side by side, member i being node `nodes[i]`'s kernel `kernels[i]` with `grids[i]`."""

    kernel: str
    stream: int
    nodes: tuple[str, ...]
    kernels: tuple[str, ...]
    grids: tuple[tuple[int, int, int], ...]


@dataclass
class CudaPlan:
    graph_name: str
    steps: list[Step]
    kernels: dict[str, Kernel]
    locations: dict[str, Location]
    types: dict[str, TensorType]
    arena_bytes: int
    weights_bytes: int
    weight_offsets: dict[str, int]
    value_bytes: dict[str, int]  # unplanned fallback: node result -> its own buffer's size
    streams: tuple[int, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    events: tuple[str, ...] = field(default=())
    host_weight_offsets: dict[str, int] = field(default_factory=dict)  # pinned host weights
    host_weights_bytes: int = 0
    host_arena_bytes: int = 0  # the pinned mirror of the arena holding host values
    rewrites: tuple[DecodeRewrite, ...] = ()  # the decode rewrites taken, in issue order
    merges: tuple[LaunchMerge, ...] = ()  # the merged launches, in issue order

    @property
    def is_planned(self) -> bool:
        return not self.value_bytes

    def source(self) -> str:
        """The CUDA module: prelude and every kernel this plan launches, once each."""
        return module_source(self.kernels.values())

    def count(self, kind: type) -> int:
        return sum(1 for s in self.steps if isinstance(s, kind))
