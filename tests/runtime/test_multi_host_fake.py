"""Ranks of a run spread over hosts (runtime/multi/hosts.py), as threads on a fake CuPy and NCCL.

Each thread plays one host's process: it makes its `HostRank` with the same rank programs, they
meet through the rendezvous (TCP on localhost, or a file), and each returns the outputs it owns.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.rank_programs import lower_ranks
from optgraph.errors import InputError, OptGraphError
from optgraph.reference.interpreter import random_inputs, run_reference
from optgraph.runtime.multi.hosts import (
    FileRendezvous,
    HostRank,
    Rendezvous,
    TcpRendezvous,
    rendezvous_from_environment,
)
from tests.support import fake_nccl
from tests.support.fake_cupy import fake_cupy
from tests.support.placed_graphs import COLLECTIVES

SECRET = b"a-test-secret-of-enough-bytes"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_hosts(texts: list[str], rendezvous: Rendezvous) -> list[Any]:
    """Rank r built from texts[r] (all the same graph, unless a test says otherwise)."""
    graphs = [og.parse(t) for t in texts]
    inputs = random_inputs(graphs[0], seed=3)
    results: list[Any] = [None] * len(texts)

    def host(rank: int) -> None:
        try:
            ranks = lower_ranks(graphs[rank])
            with HostRank(ranks, {}, rank=rank, device=rank, rendezvous=rendezvous) as me:
                results[rank] = me.run(inputs)
        except Exception as err:  # noqa: BLE001 - the test reads it
            results[rank] = err

    threads = [threading.Thread(target=host, args=(r,), daemon=True) for r in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    return [inputs, *results]


@pytest.mark.parametrize("kind", ["tcp", "file"])
def test_ranks_meet_through_the_rendezvous_and_own_their_outputs(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where: Rendezvous = (
        TcpRendezvous("127.0.0.1", free_port(), SECRET, timeout=30)
        if kind == "tcp"
        else FileRendezvous(str(tmp_path / "ids"), SECRET, timeout=30)
    )
    with fake_cupy(monkeypatch) as fake:
        fake.device_count = 2
        inputs, zero, one = run_hosts([COLLECTIVES, COLLECTIVES], where)
    want = run_reference(og.parse(COLLECTIVES), inputs, {})
    assert set(zero) == {"s", "g", "g0"} and set(one) == {"r"}
    for name, value in {**zero, **one}.items():
        assert np.array_equal(value, want[name]), name


@pytest.mark.parametrize("kind", ["tcp", "file"])
def test_a_rank_that_compiled_another_graph_is_refused(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    where: Rendezvous = (
        TcpRendezvous("127.0.0.1", free_port(), SECRET, timeout=5)
        if kind == "tcp"
        else FileRendezvous(str(tmp_path / "ids"), SECRET, timeout=5)
    )
    other = COLLECTIVES.replace("graph collectives", "graph other")
    monkeypatch.setattr(fake_nccl, "WAIT_SECONDS", 1.0)  # rank 0 waits for its peer in vain
    with fake_cupy(monkeypatch) as fake:
        fake.device_count = 2
        _, zero, one = run_hosts([COLLECTIVES, other], where)
    assert isinstance(one, OptGraphError)
    assert "another program" in str(one)
    # tcp: rank 0 is told at once; file: it waits for a peer in vain (the fake NCCL's timeout).
    assert isinstance(zero, OptGraphError if kind == "tcp" else TimeoutError)


def test_rendezvous_from_torchrun_variables() -> None:
    env = {"RANK": "3", "LOCAL_RANK": "1", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}
    env["OPTGRAPH_RENDEZVOUS_KEY"] = SECRET.decode()
    assert rendezvous_from_environment(env) == (3, 1, TcpRendezvous("node0", 29500, SECRET))
    assert SECRET.decode() not in repr(rendezvous_from_environment(env)[2])
    with pytest.raises(InputError, match="MASTER_ADDR, MASTER_PORT not set"):
        rendezvous_from_environment({"RANK": "0"})
