"""The several-host rendezvous against hostile peers (issue 36, finding 8).

The TCP rendezvous used to unpickle what arrived (code execution in every rank for whoever could
connect) and to authenticate with a digest of the graph text, which anyone who has the model
can compute. Now only the ids cross, as plain bytes in a strict format, between peers that prove
the secret the launcher gave them (runtime/multi/rendezvous_wire.py). Fake peers, on localhost:
garbage, a claim of 4 GiB, a pickle, a wrong secret, a right secret but another program, one
dripping its bytes, a fake rank 0; the real ranks still meet, and nothing a bad peer sends is
executed (the pickles here would create a file if anything loaded them).
"""

from __future__ import annotations

import contextlib
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


def _hostile(port: int, behave: str, marker: Path) -> bytes:
    """One fake peer; what it got back after the greeting (b"" when rank 0 hung up)."""
    with _connect(port) as sock:
        got = b""
        try:
            greeting = wire.receive_frame(sock)  # rank 0's magic, version and nonce
            if behave == "garbage":
                sock.sendall(os.urandom(64))
            elif behave == "oversized":  # a frame header claiming 4 GiB, then nothing
                sock.sendall(struct.pack(">I", 0xFFFFFFFF) + b"x" * 16)
            elif behave == "pickle":  # framed as a greeting would be
                wire.send_frame(sock, pickle.dumps(_Marker(marker)))
            elif behave == "raw-pickle":  # as multiprocessing.connection would have framed it
                sock.sendall(pickle.dumps(_Marker(marker)))
            elif behave == "drip":  # a greeting's length, then a byte at a time
                return b"cut" if _drip(sock, wire.PEER_HELLO_BYTES) else b"all sent"
            elif behave == "wrong-key":
                return _as_peer(sock, greeting, b"not-the-secret-at-all-0000")
            elif behave == "silent":
                time.sleep(0.5)
            sock.settimeout(5)
            got = sock.recv(1 << 16)
        except OSError:
            pass
        return got


def _drip(sock: socket.socket, length: int) -> bool:
    """Send a frame claiming `length` bytes, then most of them a tenth of a second apart; True
    when rank 0 hung up before they were all sent."""
    sock.sendall(struct.pack(">I", length))
    for _ in range(length - 8):
        time.sleep(0.1)
        try:
            sock.sendall(b"x")
        except OSError:
            return True
    return False


def _as_peer(sock: socket.socket, greeting: bytes, secret: bytes) -> bytes:
    """A well-formed handshake of rank 1 with `secret`, after `greeting`; rank 0's answer."""
    nonce0, nonce1 = greeting[len(wire.HELLO) :], os.urandom(wire.NONCE_BYTES)
    rank_bytes = struct.pack(">I", 1)
    mac = wire._mac(secret, b"peer", nonce0, nonce1, rank_bytes, DIGEST)
    wire.send_frame(sock, wire.HELLO + nonce1 + rank_bytes + DIGEST + mac)
    return wire.receive_frame(sock)


@pytest.mark.parametrize(
    "behave", ["garbage", "oversized", "pickle", "raw-pickle", "wrong-key", "silent", "drip"]
)
def test_rank0_drops_a_hostile_peer_and_serves_the_real_rank(
    behave: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from optgraph.runtime.multi import hosts

    monkeypatch.setattr(hosts, "PEER_SECONDS", 1.0)  # a silent peer holds rank 0 up 1 s
    port, results = free_port(), dict[str, Any]()
    marker = tmp_path / "unpickled"
    thread = _rank0(port, 2, results)
    answer = _hostile(port, behave, marker)
    assert not answer.endswith(wire.encode_ids(IDS)[-16:])  # no ids for it
    assert not marker.exists()
    if behave == "wrong-key":
        assert answer == wire.DENIED  # and nothing else: it learns nothing
    elif behave == "drip":
        assert answer == b"cut"  # 1 s in all, not 1 s per byte
    else:
        assert answer == b""  # hung up on, nothing sent but the greeting
    got = TcpRendezvous("127.0.0.1", port, SECRET, timeout=20).exchange(None, 1, 2, DIGEST)
    thread.join(20)
    assert got == IDS and results["rank0"] == IDS


def test_a_rank_with_another_secret_is_told_so(monkeypatch: pytest.MonkeyPatch) -> None:
    port, results = free_port(), dict[str, Any]()
    thread = _rank0(port, 2, results, timeout=1)
    wrong = TcpRendezvous("127.0.0.1", port, b"another-secret-of-enough-bytes", timeout=5)
    with pytest.raises(OptGraphError, match="refused this rank: its rendezvous secret differs"):
        wrong.exchange(None, 1, 2, DIGEST)
    thread.join(10)
    assert isinstance(results["rank0"], OptGraphError)  # rank 1 never came: rank 0 times out
    assert "ranks [1] did not come" in str(results["rank0"])


def test_a_rank_of_another_program_fails_on_both_sides() -> None:
    port, results = free_port(), dict[str, Any]()
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
        return (Path.touch, (str(self.path),))


def test_the_marker_pickle_would_show_a_load(tmp_path: Path) -> None:
    """What these tests assert absent (the marker file) is what loading the pickle makes."""
    marker = tmp_path / "loaded"
    pickle.loads(pickle.dumps(_Marker(marker)))
    assert marker.exists()


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


def test_a_greeting_longer_than_its_size_is_refused_before_it_is_read() -> None:
    """A claim of 64 KiB (under `MAX_FRAME`) for a greeting of 108 bytes: dropped at once,
    not waited for."""
    a, b = socket.socketpair()
    with a, b:
        b.settimeout(5)
        a.sendall(struct.pack(">I", 1 << 16))
        with pytest.raises(wire.WireError, match="claiming 65536 bytes"):
            wire.serve_peer(b, SECRET, DIGEST, wire.encode_ids(IDS), 2, time.monotonic() + 5)


def test_three_ranks_meet_with_the_secret() -> None:
    port, results = free_port(), dict[str, Any]()
    thread = _rank0(port, 4, results)
    got: list[Any] = [None] * 3

    def peer(rank: int) -> None:
        where = TcpRendezvous("127.0.0.1", port, SECRET, timeout=20)
        got[rank - 1] = where.exchange(None, rank, 4, DIGEST)

    peers = [threading.Thread(target=peer, args=(r,), daemon=True) for r in (1, 2, 3)]
    for t in peers:
        t.start()
    for t in [*peers, thread]:
        t.join(30)
    assert got == [IDS] * 3 and results["rank0"] == IDS


def _fake_rank0(port: int, answer: bytes, hello: bytes = wire.HELLO) -> threading.Thread:
    """A process on rank 0's port, without the secret, that greets with `hello` and answers
    `answer` to whatever comes."""
    server = socket.create_server(("127.0.0.1", port))

    def pose() -> None:
        with server:
            conn, _ = server.accept()
            with conn, contextlib.suppress(wire.WireError, OSError):  # the peer may hang up
                wire.send_frame(conn, hello + os.urandom(wire.NONCE_BYTES))
                wire.receive_frame(conn)
                wire.send_frame(conn, answer)

    thread = threading.Thread(target=pose, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize(
    "answer",
    [
        wire.ERROR + wire.ANOTHER_PROGRAM + bytes(32),  # a reason without rank 0's proof
        wire.ERROR + b"\x1b[2J another program",  # free text is no answer
        wire.DENIED + b"and more",
        b"",
    ],
    ids=["unproven-reason", "free-text", "long-denied", "empty"],
)
def test_a_fake_rank0_cannot_say_why_either(answer: bytes) -> None:
    port = free_port()
    thread = _fake_rank0(port, answer)
    with pytest.raises(OptGraphError, match="did not prove the run's secret") as err:
        TcpRendezvous("127.0.0.1", port, SECRET, timeout=5).exchange(None, 1, 2, DIGEST)
    thread.join(5)
    assert "\x1b" not in str(err.value)


def test_a_rank0_of_another_protocol_version_is_named() -> None:
    port = free_port()
    thread = _fake_rank0(port, b"", hello=wire.MAGIC + struct.pack(">H", 2))
    with pytest.raises(
        OptGraphError, match="rendezvous protocol version 2, this optgraph speaks 1"
    ):
        TcpRendezvous("127.0.0.1", port, SECRET, timeout=5).exchange(None, 1, 2, DIGEST)
    thread.join(5)


@pytest.mark.parametrize("secret", [b"", b"short", "a-str-is-not-bytes-0123456789"])
def test_no_rendezvous_starts_without_a_secret(secret: Any, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="use at least 16 random bytes: set OPTGRAPH_RENDEZVOUS"):
        TcpRendezvous("127.0.0.1", free_port(), secret)
    with pytest.raises(InputError, match="use at least 16 random bytes"):
        FileRendezvous(str(tmp_path / "ids"), secret)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o700 | 0o040])
def test_a_key_file_others_may_read_or_write_is_refused(mode: int, tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_bytes(SECRET)
    key.chmod(mode)
    with pytest.raises(InputError, match=f"may be read by others \\(mode {mode:o}\\); chmod 600"):
        wire.rendezvous_secret({wire.KEY_FILE_VARIABLE: str(key), wire.KEY_VARIABLE: "x" * 32})


def test_a_key_file_must_be_a_small_regular_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not a regular file"):
        wire.rendezvous_secret({wire.KEY_FILE_VARIABLE: str(tmp_path)})
    big = tmp_path / "big"
    big.write_bytes(b"k" * (wire.MAX_KEY_FILE_BYTES + 1))
    big.chmod(0o600)
    with pytest.raises(InputError, match="holds more than 4096 bytes"):
        wire.rendezvous_secret({wire.KEY_FILE_VARIABLE: str(big)})
    with pytest.raises(InputError, match="cannot read the key file"):
        wire.rendezvous_secret({wire.KEY_FILE_VARIABLE: str(tmp_path / "missing")})


def test_a_rank_beyond_the_world_is_told_so_and_rank0_serves_on() -> None:
    port, results = free_port(), dict[str, Any]()
    thread = _rank0(port, 2, results)
    with pytest.raises(OptGraphError, match="rank 0 runs fewer ranks than this rank's number"):
        TcpRendezvous("127.0.0.1", port, SECRET, timeout=5).exchange(None, 5, 2, DIGEST)
    got = TcpRendezvous("127.0.0.1", port, SECRET, timeout=5).exchange(None, 1, 2, DIGEST)
    thread.join(10)
    assert got == IDS and results["rank0"] == IDS
