"""Run one rank's lowered program in the CUDA emulator, its collectives fed from given values.

The CPU counterpart of `runtime/multi_gpu.run_rank_alone`: every kernel of rank r's plan runs
in the emulator (`cuda_emulator.run_plan`) at the planned offsets of r's arena; each
`CollectiveStep` becomes a copy of the value the reference computed for its result into the
result's location, and a copy of its local operand out to a buffer of its own, read back as
`sent[node]`. So each rank's program, its collectives' source and destination locations
included, is checked against the reference without its peers. With `take_adds`, an all_reduce
offered the residual add after it (`CollectiveStep.then_add`) does what the peer kernel does:
the add's result (the reference's value) is written at the all_reduce's place, at the add's
location, and the add's launch is skipped; so the offer's legality (nothing between them
needs those bytes, nothing reads the sum itself) is checked on every plan that has one:

    outputs, sent = run_rank_emulated(ranks, 1, inputs, weights)
    outputs == reference outputs owned by rank 1; sent["s"] == reference value of its operand
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from optgraph.codegen.plan.lowered import RankPrograms
from optgraph.codegen.plan.steps import CollectiveStep, CopyStep, Location, Step
from optgraph.ir.graph import TensorType
from optgraph.runtime.multi.gpus import reference_values
from tests.support.cuda_emulator import run_plan


def run_rank_emulated(
    ranks: RankPrograms,
    rank: int,
    inputs: Mapping[str, np.ndarray],
    weights: Mapping[str, np.ndarray],
    *,
    take_adds: bool = False,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(rank `rank`'s outputs, {collective node: the local operand it sent}) in the emulator."""
    program = ranks.ranks[rank]
    plan = program.main.plan
    nodes = {n.name: n for n in program.graph.nodes}
    collectives = ranks.collectives(rank)
    operands = {s.node: nodes[s.node].operands[0] for s in collectives if s.src is not None}
    adds = {  # all_reduce node -> the add it does (take_adds)
        step.node: plan.steps[i + 1].node
        for i, step in enumerate(plan.steps)
        if take_adds and isinstance(step, CollectiveStep) and step.then_add is not None
    }
    names = [s.node for s in collectives] + list(operands.values()) + list(adds.values())
    values = reference_values(ranks.graph, names, inputs, weights)
    types = dict(plan.types)
    extra_inputs: dict[str, np.ndarray] = {}
    locations = dict(plan.locations)
    steps: list[Step] = []
    sent_names: list[str] = []
    skipped = set(adds.values())
    for step in plan.steps:
        if not isinstance(step, CollectiveStep):
            if getattr(step, "node", None) not in skipped:
                steps.append(step)
            continue
        if step.src is not None:
            name = f"sent.{step.node}"
            operand_type = types[operands[step.node]]
            types[name] = operand_type
            extra_inputs[name] = np.zeros(operand_type.shape, values[operands[step.node]].dtype)
            locations[name] = Location("input", name, 0)
            sent_names.append(name)
            steps.append(CopyStep(step.node, step.stream, locations[name], step.src,
                                  operand_type.nbytes))  # fmt: skip
        if step.dst is not None:
            fed, dst = step.node, step.dst
            if step.node in adds and step.then_add is not None:
                fed, dst = adds[step.node], step.then_add[1]  # the add's result, at its place
            name = f"fed.{fed}"
            value = values[fed]
            types[name] = TensorType(types[fed].dtype, value.shape)
            extra_inputs[name] = value
            locations[name] = Location("input", name, 0)
            steps.append(CopyStep(step.node, step.stream, dst, locations[name],
                                  types[name].nbytes))  # fmt: skip
    fed_plan = replace(
        plan,
        steps=steps,
        types=types,
        locations=locations,
        inputs=plan.inputs + tuple(extra_inputs),
        outputs=plan.outputs + tuple(sent_names),
    )
    rank_inputs = {i.name: inputs[i.name] for i in program.graph.inputs}
    rank_weights = {w.name: weights[w.name] for w in program.graph.weights}
    results = run_plan(fed_plan, {**rank_inputs, **extra_inputs}, rank_weights)
    outputs = {n: results[n] for n in plan.outputs}
    sent = {n.removeprefix("sent."): results[n] for n in sent_names}
    expected = {node: values[operand] for node, operand in operands.items()}
    for node, value in expected.items():
        sent[node] = sent[node].reshape(value.shape)
    return outputs, sent


def expected_sent(
    ranks: RankPrograms,
    rank: int,
    inputs: Mapping[str, np.ndarray],
    weights: Mapping[str, np.ndarray],
) -> dict[str, np.ndarray]:
    """{collective node: the reference value of rank `rank`'s operand of it}."""
    nodes = {n.name: n for n in ranks.ranks[rank].graph.nodes}
    operands = {
        s.node: nodes[s.node].operands[0] for s in ranks.collectives(rank) if s.src is not None
    }
    values = reference_values(ranks.graph, list(operands.values()), inputs, weights)
    return {node: values[operand] for node, operand in operands.items()}
