"""What the ranks of a several-host run exchange before NCCL connects them, byte for byte.

The only data is one NCCL unique id per communicator group, so nothing but plain bytes ever
crosses the network or the shared file: no pickle, nothing a peer sends is executed or decoded
into objects. Every message is a *frame*: a 4-byte big-endian length, then that many bytes, at
most `MAX_FRAME` (a peer claiming more is dropped before anything is allocated). The ids are
spelled strictly (`encode_ids` / `decode_ids`): counts and lengths bounded, every byte accounted
for, nothing left over.

Peers prove they hold the run's *secret* (what the launcher gives every rank: an environment
variable or a file only its user can read, `rendezvous_secret`), never something derived from
the model, which anyone who has the model knows. A mutual HMAC-SHA256 challenge-response:

    rank 0 -> peer:   HELLO, version, nonce0 (32 random bytes)
    peer -> rank 0:   HELLO, nonce1, rank, program digest, HMAC(secret, "peer"|nonce0|nonce1|rank|digest)
    rank 0 -> peer:   OK, ids, HMAC(secret, "rank0"|nonce0|nonce1|ids)       (or DENIED / ERROR)

so a peer without the secret learns nothing and is dropped (rank 0 keeps serving the others),
and a process posing as rank 0 without it cannot hand out ids (the peer checks rank 0's proof).
The program digest is not a secret: it only tells a rank that compiled another graph that it
did (an ERROR frame naming the mismatch), instead of joining mismatched collectives.

Complexity: O(bytes exchanged) per peer.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import socket
import stat
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from optgraph.errors import InputError, OptGraphError

if TYPE_CHECKING:
    from optgraph.runtime.cuda.collectives import UniqueId

Ids = dict[tuple[int, ...], "UniqueId"]

MAX_FRAME = 1 << 20  # bytes of one frame: thousands of groups' ids fit; a larger claim is hostile
MAX_GROUPS = 4096
MAX_GROUP_SIZE = 1024  # device ids end at 1023 (ir/limits.MAX_DEVICE_ID)
MAX_ID_BYTES = 1024  # NCCL's unique id is 128 bytes
HELLO = b"OGRDZV\x00\x01"  # magic and protocol version 1
NONCE_BYTES = 32
DIGEST_BYTES = 32
MIN_SECRET_BYTES = 16
KEY_VARIABLE = "OPTGRAPH_RENDEZVOUS_KEY"
KEY_FILE_VARIABLE = "OPTGRAPH_RENDEZVOUS_KEY_FILE"
OK, DENIED, ERROR = b"K", b"D", b"E"
# How an id is spelled back: raw bytes, or NCCL's ncclUniqueId as a tuple of C chars (signed).
_BYTES, _CHARS = 0, 1


class WireError(Exception):
    """A peer sent something that is not this protocol (garbage, a wrong length, a bad MAC)."""


# -- the ids -----------------------------------------------------------------------------------


def encode_ids(ids: Mapping[tuple[int, ...], UniqueId]) -> bytes:
    """`ids` as bytes: count, then per group its size, its devices, the id's form and bytes."""
    if len(ids) > MAX_GROUPS:
        raise OptGraphError(f"rendezvous: {len(ids)} communicator groups (at most {MAX_GROUPS})")
    parts = [struct.pack(">I", len(ids))]
    for group, uid in sorted(ids.items()):
        if not 0 < len(group) <= MAX_GROUP_SIZE or not all(0 <= d < MAX_GROUP_SIZE for d in group):
            raise OptGraphError(f"rendezvous: group {group} cannot be sent")
        form, raw = (_BYTES, bytes(uid)) if isinstance(uid, bytes) else (_CHARS, _chars(uid))
        if len(raw) > MAX_ID_BYTES:
            raise OptGraphError(f"rendezvous: an id of {len(raw)} bytes (at most {MAX_ID_BYTES})")
        parts.append(struct.pack(">H", len(group)) + struct.pack(f">{len(group)}H", *group))
        parts.append(struct.pack(">BH", form, len(raw)) + raw)
    return b"".join(parts)


def _chars(uid: tuple[int, ...]) -> bytes:
    if not all(isinstance(v, int) and -128 <= v <= 255 for v in uid):
        raise OptGraphError("rendezvous: an NCCL id holds values that are not bytes")
    return bytes(v & 0xFF for v in uid)


def decode_ids(data: bytes) -> Ids:
    """The ids `encode_ids` spelled; `WireError` for anything else (every byte is checked)."""
    at = 0

    def take(n: int) -> bytes:
        nonlocal at
        if n > len(data) - at:
            raise WireError(f"ids end after {len(data)} bytes, {at + n} expected")
        chunk = data[at : at + n]
        at += n
        return chunk

    (count,) = struct.unpack(">I", take(4))
    if count > MAX_GROUPS:
        raise WireError(f"{count} groups (at most {MAX_GROUPS})")
    ids: Ids = {}
    for _ in range(count):
        (size,) = struct.unpack(">H", take(2))
        if not 0 < size <= MAX_GROUP_SIZE:
            raise WireError(f"a group of {size} devices")
        group = struct.unpack(f">{size}H", take(2 * size))
        if any(d >= MAX_GROUP_SIZE for d in group) or len(set(group)) != size:
            raise WireError(f"group {group} is not a set of device ids")
        form, length = struct.unpack(">BH", take(3))
        if form not in (_BYTES, _CHARS) or length > MAX_ID_BYTES:
            raise WireError(f"an id of form {form} and {length} bytes")
        raw = take(length)
        if group in ids:
            raise WireError(f"group {group} twice")
        ids[group] = raw if form == _BYTES else tuple(b - 256 if b > 127 else b for b in raw)
    if at != len(data):
        raise WireError(f"{len(data) - at} bytes after the ids")
    return ids


# -- frames ------------------------------------------------------------------------------------


def send_frame(sock: socket.socket, payload: bytes) -> None:
    if len(payload) > MAX_FRAME:
        raise OptGraphError(f"rendezvous: a message of {len(payload)} bytes (at most {MAX_FRAME})")
    sock.sendall(struct.pack(">I", len(payload)) + payload)


def receive_frame(sock: socket.socket) -> bytes:
    """One frame; `WireError` for a claimed length over `MAX_FRAME` (nothing allocated for it)
    or a connection closed midway."""
    (length,) = struct.unpack(">I", _receive_exactly(sock, 4))
    if length > MAX_FRAME:
        raise WireError(f"a frame claiming {length} bytes (at most {MAX_FRAME})")
    return _receive_exactly(sock, length)


def _receive_exactly(sock: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = sock.recv(min(n - got, 65536))
        if not chunk:
            raise WireError(f"the connection closed after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


# -- the handshake -----------------------------------------------------------------------------


def _mac(secret: bytes, *parts: bytes) -> bytes:
    return hmac.new(secret, b"".join(parts), hashlib.sha256).digest()


def serve_peer(
    sock: socket.socket, secret: bytes, digest: bytes, ids_bytes: bytes, world: int
) -> int:
    """Rank 0's side with one peer: the peer's rank once it proved the secret and got the ids.
    `WireError` for a peer that is not a rank of this run (nothing sent to it but a DENIED);
    `OptGraphError` for a rank that proved the secret but compiled another program."""
    nonce0 = os.urandom(NONCE_BYTES)
    send_frame(sock, HELLO + nonce0)
    hello = receive_frame(sock)
    size = len(HELLO) + NONCE_BYTES + 4 + DIGEST_BYTES + 32
    if len(hello) != size or not hello.startswith(HELLO):
        raise WireError(f"a greeting of {len(hello)} bytes that is not this protocol's")
    at = len(HELLO)
    nonce1 = hello[at : at + NONCE_BYTES]
    rank_bytes = hello[at + NONCE_BYTES : at + NONCE_BYTES + 4]
    peer_digest = hello[at + NONCE_BYTES + 4 : at + NONCE_BYTES + 4 + DIGEST_BYTES]
    mac = hello[-32:]
    if not hmac.compare_digest(mac, _mac(secret, b"peer", nonce0, nonce1, rank_bytes, peer_digest)):
        send_frame(sock, DENIED)
        raise WireError("a peer without the run's secret")
    rank = int(struct.unpack(">I", rank_bytes)[0])
    if peer_digest != digest:
        send_frame(sock, ERROR + b"another program")
        raise OptGraphError(
            f"rank 0: rank {rank} compiled another program (every rank must compile the same "
            "graph with the same pipeline)"
        )
    if not 0 < rank < world:
        send_frame(sock, ERROR + b"no such rank")
        raise WireError(f"rank {rank} in a run of {world}")
    send_frame(sock, OK + ids_bytes + _mac(secret, b"rank0", nonce0, nonce1, ids_bytes))
    return rank


def ask_rank0(sock: socket.socket, secret: bytes, digest: bytes, rank: int, where: str) -> Ids:
    """A peer's side: prove the secret, check rank 0's proof, return the ids it sent."""
    try:
        hello = receive_frame(sock)
        if len(hello) != len(HELLO) + NONCE_BYTES or not hello.startswith(HELLO):
            raise WireError("the greeting is not this protocol's")
        nonce0, nonce1 = hello[len(HELLO) :], os.urandom(NONCE_BYTES)
        rank_bytes = struct.pack(">I", rank)
        mac = _mac(secret, b"peer", nonce0, nonce1, rank_bytes, digest)
        send_frame(sock, HELLO + nonce1 + rank_bytes + digest + mac)
        answer = receive_frame(sock)
    except WireError as err:
        raise OptGraphError(f"rank {rank}: {where} is not an optgraph rank 0 ({err})") from None
    if answer[:1] == DENIED:
        raise OptGraphError(
            f"rank {rank}: rank 0 on {where} refused this rank: its rendezvous secret differs "
            f"({KEY_VARIABLE} / {KEY_FILE_VARIABLE})"
        )
    if answer[:1] == ERROR:
        why = answer[1:64].decode("ascii", "replace")
        if why == "another program":
            why = "rank 0 runs another program (every rank must compile the same graph with the same pipeline)"
        raise OptGraphError(f"rank {rank}: {where}: {why}")
    body, mac = answer[1:-32], answer[-32:]
    if (
        answer[:1] != OK
        or len(answer) < 33
        or not hmac.compare_digest(mac, _mac(secret, b"rank0", nonce0, nonce1, body))
    ):
        raise OptGraphError(
            f"rank {rank}: the rank 0 on {where} did not prove the run's secret: refused"
        )
    try:
        return decode_ids(body)
    except WireError as err:
        raise OptGraphError(f"rank {rank}: rank 0 sent ids that do not parse ({err})") from None


# -- files -------------------------------------------------------------------------------------


def seal(secret: bytes, digest: bytes, ids_bytes: bytes) -> bytes:
    """The file `FileRendezvous` writes: HELLO, the program digest, the ids, their MAC."""
    body = HELLO + digest + ids_bytes
    return body + _mac(secret, b"file", body)


def unseal(secret: bytes, digest: bytes, data: bytes, rank: int, path: str) -> Ids:
    """The ids of a file `seal` wrote with this secret; an `OptGraphError` for anything else."""
    head = len(HELLO) + DIGEST_BYTES
    if len(data) < head + 32 or len(data) > MAX_FRAME or not data.startswith(HELLO):
        raise OptGraphError(f"rank {rank}: '{path}' is not an optgraph rendezvous file")
    body, mac = data[:-32], data[-32:]
    if not hmac.compare_digest(mac, _mac(secret, b"file", body)):
        raise OptGraphError(
            f"rank {rank}: '{path}' was not written with this run's secret "
            f"({KEY_VARIABLE} / {KEY_FILE_VARIABLE}): refused"
        )
    if body[len(HELLO) : head] != digest:
        raise OptGraphError(
            f"rank {rank}: '{path}' holds the ids of another program (every rank must "
            "compile the same graph with the same pipeline)"
        )
    try:
        return decode_ids(body[head:])
    except WireError as err:
        raise OptGraphError(f"rank {rank}: '{path}': ids that do not parse ({err})") from None


# -- the secret --------------------------------------------------------------------------------


def rendezvous_secret(environ: Mapping[str, str]) -> bytes:
    """The run's secret, as the launcher gives it: `OPTGRAPH_RENDEZVOUS_KEY` (at least 16
    bytes) or `OPTGRAPH_RENDEZVOUS_KEY_FILE` (a file of this user that no one else may read).
    An `InputError` saying how to give one when there is none or it is weak."""
    path = environ.get(KEY_FILE_VARIABLE)
    if path:
        try:
            info = os.stat(path)
            if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
                raise InputError(
                    f"rendezvous: the key file '{path}' may be read by others "
                    f"(mode {stat.S_IMODE(info.st_mode):o}); chmod 600 it"
                )
            if hasattr(os, "getuid") and info.st_uid != os.getuid():
                raise InputError(f"rendezvous: the key file '{path}' belongs to another user")
            secret = Path(path).read_bytes().strip()
        except OSError as err:
            raise InputError(
                f"rendezvous: cannot read the key file '{path}': {err.strerror}"
            ) from None
        where = f"the key file '{path}'"
    elif environ.get(KEY_VARIABLE):
        secret, where = environ[KEY_VARIABLE].encode(), KEY_VARIABLE
    else:
        raise InputError(
            f"rendezvous: no secret: set {KEY_VARIABLE} (or {KEY_FILE_VARIABLE}, a file only you "
            "can read) to the same random value for every rank, e.g. "
            "\"$(python -c 'import secrets; print(secrets.token_hex(32))')\""
        )
    if len(secret) < MIN_SECRET_BYTES:
        raise InputError(
            f"rendezvous: the secret in {where} has {len(secret)} bytes; use at least "
            f"{MIN_SECRET_BYTES} random ones"
        )
    return secret
