"""The fork cost model of `assign-streams`: which branches of a chain cover pay for a stream.

Every kernel runs in one CUDA graph with programmatic dependent launch (PDL) between consecutive
kernels of a stream, so on one stream a kernel costs max(roofline, `kernel_s`), `kernel_s` being
the measured least time of a kernel there. With merged launches (codegen/plan/merge_launches.py),
consecutive independent kernels of one stream become one launch: the kernels of one *run* (in
the graph's order, kernels none of which depends on another, at most `RUN_MEMBERS`, each one that
`may_share_launch`) cost max(kernel_s, sum of their rooflines) together. A dependency between
streams (record + wait: an ordinary graph edge, no PDL) costs `wait_s`.

For a candidate branch B (one chain, or chains that feed one another) and the work S beside it
(the estimated critical path of everything else from B's fork to the first node that joins it):

    one stream  = S + B's inline share         (what B adds to its runs; ~0 for a kernel that
                                                shares its launch with its siblings')
    two streams = max(S, B's own time, rooflines of B and S, spacing_s x kernels of B and S)
    gain        = one stream - two streams     (`fork_gain`)
    cost        = wait_s x (waits into B + 1 for the join)
    fork iff gain > cost                       (`fork_pays`; a tie does not fork)

Two streams are no faster than the longer side, than the memory system and compute units (the
rooflines add up: bandwidth- or compute-bound kernels gain nothing from streams) or than the
launch throughput (`spacing_s` per kernel: tiny kernels overlap only so far). So a branch of one
small product beside its siblings (q/k/v, gate/up of a decode step) gains about nothing, its
launch being merged with theirs, and never forks; several dependent kernels that share no
launch (an MoE expert of library-call products) gain their latencies and fork.

    before: %x = rms_norm(..) : f16[1,512]   %q = matmul(%x, %wq)   %k = matmul(%x, %wk)
    after:  one stream, given order: q and k share one launch, a fork gains 0 and costs 2 waits

`prune_by_threshold` is the earlier rule (a branch lighter than `min-branch-us` on the roofline
plus a launch stays on its producer's stream), kept for `assign-streams{min-branch-us=T}`.
Both run in O(V + E). Not modelled: the code generator's exact merge rules (block sizes, planned
bytes), occupancy (a kernel of few blocks is modelled as latency, not as a share of the device),
the memory traffic several streams add.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from optgraph.analysis.chain_cover import PathCover
from optgraph.analysis.schedule_estimate import kept_data_predecessors, node_costs
from optgraph.ir.graph import Graph, Node
from optgraph.ir.op_costs import DeviceProfile, roofline_seconds


@dataclass(frozen=True)
class ForkModel:
    """The constants of the model (seconds); see the module docstring."""

    kernel_s: float  # least time of one kernel on one stream (PDL chain)
    wait_s: float  # one cross-stream dependency
    spacing_s: float  # least device time per kernel while streams overlap
    merged_launches: bool = True

    @classmethod
    def for_profile(
        cls,
        profile: DeviceProfile,
        kernel_us: float = -1.0,
        wait_us: float = -1.0,
        spacing_us: float = -1.0,
        merged_launches: bool = True,
    ) -> ForkModel:
        """The profile's measured figures, each replaced by an option given as >= 0 (in us)."""

        def pick(us: float, default: float) -> float:
            return us * 1e-6 if us >= 0 else default

        return cls(
            pick(kernel_us, profile.kernel_latency),
            pick(wait_us, profile.wait_latency),
            pick(spacing_us, profile.kernel_spacing),
            merged_launches,
        )


@dataclass(frozen=True)
class KernelTimes:
    """Per node: whether it launches a kernel, its roofline and its time on one stream (0 for
    events and aliasing views, which launch nothing)."""

    is_kernel: list[bool]
    roofline: list[float]
    seconds: list[float]
    run: list[int]  # its launch run on one stream in the graph's order (-1: no kernel)

    def reordered(self, order: Sequence[int]) -> KernelTimes:
        """The figures of node order[0], order[1], ..."""
        return KernelTimes(
            [self.is_kernel[i] for i in order],
            [self.roofline[i] for i in order],
            [self.seconds[i] for i in order],
            [self.run[i] for i in order],
        )


def kernel_times(graph: Graph, profile: DeviceProfile, model: ForkModel) -> KernelTimes:
    """The figures of every node of `graph`; runs follow its issue order (see `launch_runs`)."""
    n = len(graph.nodes)
    is_kernel, roof, seconds = [False] * n, [0.0] * n, [0.0] * n
    kernel_s = model.kernel_s
    known: dict[tuple[int, str], float] = {}  # roofline by (cost object, dtype)
    costs = node_costs(graph)  # alive throughout: their ids name them in `known`
    for v, (node, cost) in enumerate(zip(graph.nodes, costs)):
        if cost is None or node.type is None:
            continue
        key = (id(cost), node.type.dtype)  # repeated layers share their cost objects
        r = known.get(key)
        if r is None:
            r = known[key] = roofline_seconds(cost, node.type.dtype, profile)
        is_kernel[v] = True
        roof[v] = r
        seconds[v] = max(r, kernel_s)
    if model.merged_launches:
        run = launch_runs(kept_data_predecessors(graph), is_kernel, _launch_sharing(graph.nodes))
    else:
        run = [v if k else -1 for v, k in enumerate(is_kernel)]
    return KernelTimes(is_kernel, roof, seconds, run)


@dataclass(frozen=True)
class BranchFigures:
    """A candidate branch B and the work S beside it (seconds; see the module docstring)."""

    own_s: float  # B on its own stream: its kernels one after the other
    inline_s: float  # what B adds to the producer's stream (merged launches share latency)
    roof_s: float  # B's rooflines: its share of the memory system and the compute units
    launches: int  # B's kernels
    sibling_s: float  # S: from B's fork to its join, the estimated critical path of the rest
    sibling_roof_s: float  # S's rooflines
    sibling_launches: int  # S's kernels
    waits: int  # cross-stream dependencies a fork adds: into B, and the join


def fork_gain(b: BranchFigures, model: ForkModel) -> float:
    """Seconds a fork saves before its waits are paid: one stream runs S then B's inline share;
    two run them side by side, no faster than the longer one, than the device's memory and
    compute (the rooflines add up) or than its launch throughput (`spacing_s` a kernel)."""
    inline = b.sibling_s + b.inline_s
    forked = max(
        b.sibling_s,
        b.own_s,
        b.roof_s + b.sibling_roof_s,
        model.spacing_s * (b.launches + b.sibling_launches),
    )
    return inline - forked


# Gains within this of the cost are ties, which do not fork (float sums of equal latencies).
TIE_S = 1e-9


def fork_pays(b: BranchFigures, model: ForkModel) -> bool:
    """Whether the fork saves more than its waits cost (a tie does not fork)."""
    return fork_gain(b, model) > b.waits * model.wait_s + TIE_S


class Groups:
    """Union-find over chain ids; the root of a merged group is the target's root."""

    def __init__(self, n: int):
        self.parent = list(range(n))

    def find(self, c: int) -> int:
        root = c
        while self.parent[root] != root:
            root = self.parent[root]
        while self.parent[c] != root:
            self.parent[c], c = root, self.parent[c]
        return root

    def merge_into(self, c: int, target: int) -> None:
        a, b = self.find(c), self.find(target)
        if a != b:
            self.parent[a] = b


# At most this many kernels share one merged launch (codegen's merge_launches.MAX_MEMBERS).
RUN_MEMBERS = 8
# Ops the code generator launches on their own (several launches, large shared memory, writes
# in place): they never share a merged launch. So are products of more than one row (cuBLAS).
ALONE_OPS = frozenset({"attention", "avg_pool2d", "conv2d", "kv_cache_write", "max_pool2d"})


def may_share_launch(node: Node) -> bool:
    """Whether merged launches may put `node`'s kernel into one launch with its neighbours: the
    code generator's merge needs its own kernels of equal block size, which this approximates
    (one-row products, elementwise, reductions, data movement; see docs/passes.md)."""
    if node.op in ALONE_OPS or node.type is None:
        return False
    for n in node.body.nodes if node.body is not None else (node,):
        if n.op in ALONE_OPS:
            return False
        if n.op == "matmul" and n.type is not None and n.type.numel != n.type.shape[-1]:
            return False  # a product of more than one row
    return True


def _launch_sharing(nodes: Sequence[Node]) -> list[bool]:
    """`may_share_launch` of every node, decided once per (op, type object) for nodes without
    a body (the answer reads nothing else of them)."""
    known: dict[tuple[str, int], bool] = {}
    out = []
    for node in nodes:
        if node.body is not None:
            out.append(may_share_launch(node))
            continue
        key = (node.op, id(node.type))  # the types are alive in `nodes` throughout
        shares = known.get(key)
        if shares is None:
            shares = known[key] = may_share_launch(node)
        out.append(shares)
    return out


def launch_runs(
    preds: Sequence[Sequence[int]], is_kernel: Sequence[bool], shares: Sequence[bool]
) -> list[int]:
    """Run id of every kernel (-1 for other nodes) when the nodes, in issue order, are launched
    on one stream with merged launches: a kernel that may share a launch joins the current run
    unless it depends on one of its kernels (through views too) or the run is full; any other
    kernel is a run of its own and closes the current one. O(V + E)."""
    run = [-1] * len(preds)
    depends_on = [-1] * len(preds)  # the latest run among a node's kernel ancestors via views
    current, members, open_run = -1, 0, False
    for v, ps in enumerate(preds):
        latest = -1
        for p in ps:
            r = run[p] if is_kernel[p] else depends_on[p]
            latest = max(latest, r)
        if is_kernel[v]:
            if not (open_run and shares[v] and latest < current and members < RUN_MEMBERS):
                current, members = current + 1, 0
            run[v] = current
            members += 1
            open_run = shares[v]
        else:
            depends_on[v] = latest
    return run


def _latest(nodes: Sequence[int], finish: Sequence[float]) -> int:
    """`max(nodes, key=lambda p: (finish[p], p))`, or -1 for no nodes."""
    best, best_finish = -1, 0.0
    for p in nodes:
        f = finish[p]
        if best < 0 or f > best_finish or (f == best_finish and p > best):
            best, best_finish = p, f
    return best


class BranchCosts:
    """Evaluates candidate branches of a path cover over nodes in ASAP issue order."""

    def __init__(
        self, cover: PathCover, preds: Sequence[Sequence[int]], times: KernelTimes, model: ForkModel
    ):
        n = len(preds)
        self.cover, self.preds, self.times, self.model = cover, preds, times, model
        self.start = [0.0] * n
        self.finish = [0.0] * n
        # rooflines and kernels along each node's critical path (its latest-finishing inputs)
        self.path_roof = [0.0] * n
        self.path_kernels = [0] * n
        start, finish, path_roof, path_kernels = (
            self.start,
            self.finish,
            self.path_roof,
            self.path_kernels,
        )
        seconds, roofline, is_kernel = times.seconds, times.roofline, times.is_kernel
        for v, ps in enumerate(preds):
            critical = ps[0] if len(ps) == 1 else _latest(ps, finish)
            if critical >= 0:
                start[v] = finish[critical]
                path_roof[v] = path_roof[critical]
                path_kernels[v] = path_kernels[critical]
            finish[v] = start[v] + seconds[v]
            path_roof[v] += roofline[v]
            path_kernels[v] += is_kernel[v]
        self.succs: list[list[int]] = [[] for _ in range(n + 1)]
        for v, ps in enumerate(cover.reduced):
            for p in ps:
                self.succs[p].append(v)
        self.run = times.run
        runs = 1 + max(self.run, default=-1)
        self.run_roof: list[float] = [0.0] * runs
        self.run_kernels: list[int] = [0] * runs
        for v, r in enumerate(self.run):
            if r >= 0:
                self.run_roof[r] += roofline[v]
                self.run_kernels[r] += 1
        self.mark = [-1] * (n + 1)
        self.stamp = 0

    def _run_s(self, roof: float, kernels: int) -> float:
        return max(self.model.kernel_s, roof) if kernels else 0.0

    def _after(self, w: int, nodes: Sequence[int], inside: int) -> bool:
        """Whether node w depends on the branch: then its path is not work beside it. A node of
        the branch is reached from one of its heads (nodes without an input inside it)."""
        reach = self.cover.reach
        if reach is None:  # a graph too wide for labels: assume it does not
            return False
        mark, preds = self.mark, self.preds
        row, chain_of, pos_of = reach.rows[w], reach.chain_of, reach.pos_of  # `reaches(v, w)`
        for v in nodes:
            for p in preds[v]:
                if mark[p] == inside:
                    break  # not a head
            else:
                if row[chain_of[v]] >= pos_of[v]:
                    return True
        return False

    def branch(self, nodes: Sequence[int]) -> BranchFigures:
        """Figures of the branch made of `nodes` (ascending). O(|nodes| + their edges)."""
        self.stamp += 1
        inside = self.stamp
        mark = self.mark
        for v in nodes:
            mark[v] = inside
        times, n = self.times, len(self.preds)
        roofline, run, reduced, succs = times.roofline, self.run, self.cover.reduced, self.succs
        own = sum([times.seconds[v] for v in nodes])
        roof = sum([roofline[v] for v in nodes])
        launches = sum([times.is_kernel[v] for v in nodes])
        share: dict[int, tuple[float, int]] = {}
        waits, join = 1, n  # the join: the first node outside reading B and something else
        for v in nodes:
            for p in reduced[v]:
                if mark[p] != inside:
                    waits += 1
                    break
            for w in succs[v]:
                if w < join:
                    for q in reduced[w]:
                        if mark[q] != inside:
                            join = w
                            break
            r = run[v]
            if r >= 0:
                mine, count = share.get(r, (0.0, 0))
                share[r] = (mine + roofline[v], count + 1)
        inline = sum(
            self._run_s(self.run_roof[r], self.run_kernels[r])
            - self._run_s(self.run_roof[r] - mine, self.run_kernels[r] - count)
            for r, (mine, count) in share.items()
        )
        first = nodes[0]
        finish = self.finish
        before = _latest(self.preds[first], finish)
        after = _latest([q for q in reduced[join] if mark[q] != inside], finish)
        sibling, sibling_roof, sibling_launches = 0.0, 0.0, 0
        if (
            after >= 0
            and finish[after] > self.start[first]
            and not self._after(after, nodes, inside)
        ):
            sibling = finish[after] - self.start[first]
            roof_base, kernel_base = 0.0, 0
            if before >= 0:
                roof_base, kernel_base = self.path_roof[before], self.path_kernels[before]
            sibling_roof = min(sibling, max(0.0, self.path_roof[after] - roof_base))
            sibling_launches = max(0, self.path_kernels[after] - kernel_base)
        return BranchFigures(
            own, inline, roof, launches, sibling, sibling_roof, sibling_launches, waits
        )


def prune_by_cost(
    cover: PathCover,
    preds: Sequence[Sequence[int]],
    times: KernelTimes,
    groups: Groups,
    model: ForkModel,
) -> None:
    """Keep on a shared stream every branch whose fork does not pay. Chains that do not pay
    alone and feed one another first form one branch (one expert is often cut into several
    chains: its products and its routing weight); a branch that still does not pay joins the
    chain of its producer, or, reading only graph inputs, the chain it joins. O(V + E)."""
    n = len(preds)
    end_chain = cover.chain_of[n]
    costs = BranchCosts(cover, preds, times, model)
    # The figures of each chain, by its nodes: a group of one weak chain is that chain again.
    figures: dict[tuple[int, ...], BranchFigures] = {}
    weak = []
    for c, chain in enumerate(cover.chains):
        if c == end_chain:
            weak.append(False)
            continue
        chain_nodes = tuple(v for v in chain if v < n)
        figures[chain_nodes] = costs.branch(chain_nodes)
        weak.append(not fork_pays(figures[chain_nodes], model))
    _join_neighbours(cover, weak, groups)
    members: dict[int, list[int]] = {}
    for c, chain in enumerate(cover.chains):
        if weak[c]:
            members.setdefault(groups.find(c), []).extend(chain)
    for g, nodes in sorted(members.items(), key=lambda item: min(item[1])):
        nodes.sort()
        known = figures.get(tuple(nodes))
        if fork_pays(costs.branch(nodes) if known is None else known, model):
            continue
        first = nodes[0]
        if preds[first]:
            target = max(preds[first], key=lambda p: (costs.finish[p], p))
        else:
            inside = set(nodes)
            target = min((w for v in nodes for w in costs.succs[v] if w not in inside), default=n)
        groups.merge_into(g, cover.chain_of[target])


def _join_neighbours(cover: PathCover, weak: Sequence[bool], groups: Groups) -> None:
    for v, ps in enumerate(cover.reduced):
        for p in ps:
            a, b = cover.chain_of[p], cover.chain_of[v]
            if a != b and weak[a] and weak[b]:
                groups.merge_into(a, b)


def prune_by_threshold(
    cover: PathCover,
    preds: Sequence[Sequence[int]],
    seconds: Sequence[float],
    finish_asap: Sequence[float],
    groups: Groups,
    min_branch_s: float,
) -> None:
    """The plain threshold: chains lighter than `min_branch_s` first join the light chains they
    feed or are fed by; a branch still too light stays with the producer of its first node (one
    reading only graph inputs forks for free). O(V + E)."""
    n = len(preds)
    end_chain = cover.chain_of[n]
    work = [sum(seconds[v] for v in chain if v < n) for chain in cover.chains]
    light = [w < min_branch_s and c != end_chain for c, w in enumerate(work)]
    _join_neighbours(cover, light, groups)
    branch_work: dict[int, float] = {}
    branch_first: dict[int, int] = {}
    for c, chain in enumerate(cover.chains):
        if light[c]:
            g = groups.find(c)
            branch_work[g] = branch_work.get(g, 0.0) + work[c]
            branch_first[g] = min(branch_first.get(g, n), chain[0])
    for g, first in sorted(branch_first.items(), key=lambda item: item[1]):
        if branch_work[g] >= min_branch_s or not preds[first]:
            continue  # worth a fork, or reads only graph inputs (forks for free)
        producer = max(preds[first], key=lambda p: (finish_asap[p], p))
        groups.merge_into(g, cover.chain_of[producer])
