"""The several-host rendezvous against hostile peers (issue 36, finding 8).

The TCP rendezvous used to unpickle what arrived (code execution in every rank for whoever could
connect) and to authenticate with a digest of the graph text, which anyone who has the model
can compute. Now only the ids cross, as plain bytes in a strict format, between peers that prove
the secret the launcher gave them (runtime/multi/rendezvous_wire.py). Fake peers, on localhost:
garbage, a claim of 4 GiB, a pickle, a wrong secret, a right secret but another program, a
fake rank 0; the real ranks still meet, and nothing a bad peer sends is executed.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from optgraph.errors import InputError, OptGraphError
from optgraph.runtime.multi import rendezvous_wire as wire
from optgraph.runtime.multi.hosts import FileRendezvous, TcpRendezvous

SECRET = b"the-launchers-secret-0123456789"
DIGEST = bytes(range(32))
IDS: dict[tuple[int, ...], Any] = {
    (0, 1): tuple(range(-128, 0)),  # NCCL's id: 128 signed chars
    (1, 0, 2): b"\x00\xff" * 64,
    (2,): tuple(b"/tmp/fake-nccl-x"),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_ids_round_trip_and_every_bad_spelling_is_refused() -> None:
    data = wire.encode_ids(IDS)
    assert wire.decode_ids(data) == IDS
    bad = {
        "truncated": data[:-1],
        "trailing": data + b"\x00",
        "too many groups": struct.pack(">I", wire.MAX_GROUPS + 1),
        "empty group": struct.pack(">IH", 1, 0),
        "repeated device": struct.pack(">IHHH", 1, 2, 3, 3),
        "huge id": struct.pack(">IHHBH", 1, 1, 0, 0, 60000),
        "unknown form": struct.pack(">IHHBH", 1, 1, 0, 7, 0),
    }
    for why, spelling in bad.items():
        with pytest.raises(wire.WireError):
            wire.decode_ids(spelling)
        assert why


def _rank0(port: int, world: int, results: dict[str, Any], timeout: float = 20) -> threading.Thread:
    where = TcpRendezvous("127.0.0.1", port, SECRET, timeout=timeout)

    def serve() -> None:
        try:
            results["rank0"] = where.exchange(IDS, 0, world, DIGEST)
        except Exception as err:  # noqa: BLE001 - the test reads it
            results["rank0"] = err

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


def _connect(port: int) -> socket.socket:
    deadline = time.monotonic() + 10
    while True:
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except ConnectionRefusedError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.02)


def _hostile(port: int, behave: str) -> bytes:
    """One fake peer; what it got back (b"" when rank 0 hung up)."""
    with _connect(port) as sock:
        got = b""
        try:
            if behave == "garbage":
                sock.sendall(os.urandom(64))
            elif behave == "oversized":  # a frame header claiming 4 GiB, then nothing
                wire.receive_frame(sock)
                sock.sendall(struct.pack(">I", 0xFFFFFFFF) + b"x" * 16)
            elif behave == "pickle":  # what the old rendezvous would have executed
                wire.receive_frame(sock)
                wire.send_frame(sock, pickle.dumps({"evil": print}))
            elif behave == "wrong-key":
                return _as_peer(sock, b"not-the-secret-at-all-0000", DIGEST)
            elif behave == "silent":
                time.sleep(0.5)
            sock.settimeout(5)
            got = sock.recv(1 << 16)
        except OSError:
            pass
        return got


def _as_peer(sock: socket.socket, secret: bytes, digest: bytes, rank: int = 1) -> bytes:
    """A well-formed peer handshake with `secret`; rank 0's answer frame."""
    hello = wire.receive_frame(sock)
    nonce0, nonce1 = hello[len(wire.HELLO) :], os.urandom(wire.NONCE_BYTES)
    rank_bytes = struct.pack(">I", rank)
    mac = wire._mac(secret, b"peer", nonce0, nonce1, rank_bytes, digest)
    wire.send_frame(sock, wire.HELLO + nonce1 + rank_bytes + digest + mac)
    return wire.receive_frame(sock)


@pytest.mark.parametrize("behave", ["garbage", "oversized", "pickle", "wrong-key", "silent"])
def test_rank0_drops_a_hostile_peer_and_serves_the_real_rank(
    behave: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from optgraph.runtime.multi import hosts

    monkeypatch.setattr(hosts, "PEER_SECONDS", 1.0)  # a silent peer holds rank 0 up 1 s
    port, results = free_port(), {}
    thread = _rank0(port, 2, results)
    answer = _hostile(port, behave)
    assert not answer.endswith(wire.encode_ids(IDS)[-16:])  # no ids for it
    if behave == "wrong-key":
        assert answer == wire.DENIED
    got = TcpRendezvous("127.0.0.1", port, SECRET, timeout=20).exchange(None, 1, 2, DIGEST)
    thread.join(20)
    assert got == IDS and results["rank0"] == IDS


def test_a_rank_with_another_secret_is_told_so(monkeypatch: pytest.MonkeyPatch) -> None:
    port, results = free_port(), {}
    thread = _rank0(port, 2, results, timeout=1)
    wrong = TcpRendezvous("127.0.0.1", port, b"another-secret-of-enough-bytes", timeout=5)
    with pytest.raises(OptGraphError, match="refused this rank: its rendezvous secret differs"):
        wrong.exchange(None, 1, 2, DIGEST)
    thread.join(10)
    assert isinstance(results["rank0"], OptGraphError)  # rank 1 never came: rank 0 times out
    assert "ranks [1] did not come" in str(results["rank0"])


def test_a_rank_of_another_program_fails_on_both_sides() -> None:
    port, results = free_port(), {}
    thread = _rank0(port, 2, results)
    other = TcpRendezvous("127.0.0.1", port, SECRET, timeout=5)
    with pytest.raises(OptGraphError, match="rank 0 runs another program"):
        other.exchange(None, 1, 2, bytes(32))
    thread.join(10)
    assert "rank 1 compiled another program" in str(results["rank0"])


class _Marker:
    """A pickle that, loaded, creates a file: proof of code run by whoever unpickles it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (Path.touch, (str(self.path),))  # type: ignore[return-value]


@pytest.mark.parametrize("fake", ["no-secret", "garbage-ids", "pickle"])
def test_a_fake_rank0_cannot_hand_out_ids(fake: str, tmp_path: Path) -> None:
    """A process listening where rank 0 should be, without the secret: the peer refuses it,
    and a pickle it sends is never loaded."""
    marker = tmp_path / "unpickled"
    port = free_port()
    server = socket.create_server(("127.0.0.1", port))

    def pose() -> None:
        conn, _ = server.accept()
        with conn:
            nonce0 = os.urandom(wire.NONCE_BYTES)
            wire.send_frame(conn, wire.HELLO + nonce0)
            wire.receive_frame(conn)
            if fake == "pickle":
                wire.send_frame(conn, pickle.dumps(_Marker(marker)))
            else:
                body = wire.encode_ids(IDS) if fake == "no-secret" else os.urandom(40)
                wire.send_frame(conn, wire.OK + body + os.urandom(32))

    thread = threading.Thread(target=pose, daemon=True)
    thread.start()
    peer = TcpRendezvous("127.0.0.1", port, SECRET, timeout=5)
    with pytest.raises(OptGraphError, match="did not prove the run's secret"):
        peer.exchange(None, 1, 2, DIGEST)
    thread.join(5)
    server.close()
    assert not marker.exists()


def test_a_frame_longer_than_the_limit_is_refused_before_it_is_read() -> None:
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack(">I", wire.MAX_FRAME + 1))
        with pytest.raises(wire.WireError, match="claiming"):
            wire.receive_frame(b)


def test_the_file_rendezvous_checks_its_seal(tmp_path: Path) -> None:
    path = tmp_path / "ids"
    FileRendezvous(str(path), SECRET, timeout=1).exchange(IDS, 0, 2, DIGEST)
    assert FileRendezvous(str(path), SECRET, timeout=1).exchange(None, 1, 2, DIGEST) == IDS
    with pytest.raises(OptGraphError, match="not written with this run's secret"):
        FileRendezvous(str(path), b"another-secret-of-enough-bytes").exchange(None, 1, 2, DIGEST)
    with pytest.raises(OptGraphError, match="another program"):
        FileRendezvous(str(path), SECRET).exchange(None, 1, 2, bytes(32))
    path.write_bytes(pickle.dumps((DIGEST, IDS)))  # the old format: refused, never unpickled
    with pytest.raises(OptGraphError, match="not an optgraph rendezvous file"):
        FileRendezvous(str(path), SECRET).exchange(None, 1, 2, DIGEST)


def test_the_secret_comes_from_the_launcher(tmp_path: Path) -> None:
    assert wire.rendezvous_secret({wire.KEY_VARIABLE: SECRET.decode()}) == SECRET
    key = tmp_path / "key"
    key.write_bytes(SECRET + b"\n")
    key.chmod(0o600)
    assert wire.rendezvous_secret({wire.KEY_FILE_VARIABLE: str(key)}) == SECRET
    key.chmod(0o644)
    with pytest.raises(InputError, match="may be read by others"):
        wire.rendezvous_secret({wire.KEY_FILE_VARIABLE: str(key)})
    with pytest.raises(InputError, match="no secret: set OPTGRAPH_RENDEZVOUS_KEY"):
        wire.rendezvous_secret({})
    with pytest.raises(InputError, match="use at least 16"):
        wire.rendezvous_secret({wire.KEY_VARIABLE: "short"})
