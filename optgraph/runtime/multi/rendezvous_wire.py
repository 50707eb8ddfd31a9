"""What the ranks of a several-host run exchange before NCCL connects them, byte for byte.

The only data is one NCCL unique id per communicator group, so nothing but plain bytes ever
crosses the network or the shared file: no pickle, nothing a peer sends is executed or decoded
into objects. Every message is a *frame*: a 4-byte big-endian length, then that many bytes, at
most `MAX_FRAME`; a greeting at most `HANDSHAKE_LIMIT`, then exactly its version's size. A peer
claiming more is dropped before anything is read or allocated for it, and has until a deadline
in all, however slowly it drips its bytes. The ids are spelled strictly (`encode_ids` /
`decode_ids`): counts and lengths bounded, every byte accounted for, nothing left over.

Peers prove they hold the run's *secret* (what the launcher gives every rank: an environment
variable or a file only its user can read, `rendezvous_secret`), never something derived from
the model, which anyone who has the model knows. A mutual HMAC-SHA256 challenge-response:

    rank 0 -> peer:   HELLO (magic, version), nonce0 (32 random bytes)
    peer -> rank 0:   HELLO, nonce1, rank, program digest, HMAC(secret, "peer"|nonce0|nonce1|rank|digest)
    rank 0 -> peer:   OK, ids, HMAC(secret, "rank0"|nonce0|nonce1|ids)
                      or ERROR, reason, HMAC(secret, "rank0-error"|nonce0|nonce1|reason)
                      or DENIED (one byte, to a peer whose proof failed)

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
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from optgraph.errors import InputError, OptGraphError

if TYPE_CHECKING:
    from optgraph.runtime.cuda.collectives import UniqueId

Ids = dict[tuple[int, ...], "UniqueId"]

MAX_FRAME = 1 << 20  # bytes of one frame: thousands of groups' ids fit; a larger claim is hostile
MAX_GROUPS = 4096
MAX_GROUP_SIZE = 1024  # device ids end at 1023 (ir/limits.MAX_DEVICE_ID)
MAX_ID_BYTES = 1024  # NCCL's unique id is 128 bytes
MAGIC = b"OGRDZV"
VERSION = 1
HELLO = MAGIC + struct.pack(">H", VERSION)
NONCE_BYTES = 32
DIGEST_BYTES = 32
MIN_SECRET_BYTES = 16
MAX_KEY_FILE_BYTES = 4096
KEY_VARIABLE = "OPTGRAPH_RENDEZVOUS_KEY"
KEY_FILE_VARIABLE = "OPTGRAPH_RENDEZVOUS_KEY_FILE"
OK, DENIED, ERROR = b"K", b"D", b"E"
# Why rank 0 turned away a peer that proved the secret: ERROR + one of these bytes.
ANOTHER_PROGRAM, NO_SUCH_RANK = b"P", b"R"
_REASONS = {
    ANOTHER_PROGRAM: "rank 0 runs another program (every rank must compile the same graph with "
    "the same pipeline)",
    NO_SUCH_RANK: "rank 0 runs fewer ranks than this rank's number",
}
GREETING_BYTES = len(HELLO) + NONCE_BYTES
PEER_HELLO_BYTES = len(HELLO) + NONCE_BYTES + 4 + DIGEST_BYTES + 32
HANDSHAKE_LIMIT = 256  # bytes of a greeting frame, whatever its version
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


def receive_frame(
    sock: socket.socket, *, limit: int = MAX_FRAME, deadline: float | None = None
) -> bytes:
    """One frame of at most `limit` bytes; `WireError` for a claim of more (nothing read or
    allocated for it), a connection closed midway, or `deadline` (a `time.monotonic()` instant)
    passed."""
    (length,) = struct.unpack(">I", _receive_exactly(sock, 4, deadline))
    if length > limit:
        raise WireError(f"a frame claiming {length} bytes (at most {limit})")
    return _receive_exactly(sock, length, deadline)


def _receive_exactly(sock: socket.socket, n: int, deadline: float | None) -> bytes:
    chunks, got = [], 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise WireError(f"no more time for the peer after {got} of {n} bytes")
            sock.settimeout(left)
            try:
                chunk = sock.recv(min(n - got, 65536))
            except TimeoutError:
                raise WireError(f"no more time for the peer after {got} of {n} bytes") from None
        else:
            chunk = sock.recv(min(n - got, 65536))  # a timeout is the caller's to retry
        if not chunk:
            raise WireError(f"the connection closed after {got} of {n} bytes")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


# -- the handshake -----------------------------------------------------------------------------


def _mac(secret: bytes, label: bytes, *parts: bytes) -> bytes:
    """HMAC-SHA256 of the label (length-prefixed, so no message of one kind reads as another's)
    and the parts (all of fixed length but the last)."""
    return hmac.new(secret, bytes([len(label)]) + label + b"".join(parts), hashlib.sha256).digest()


def _check_hello(frame: bytes, size: int) -> None:
    """`frame` opens with this protocol's magic and version and has `size` bytes."""
    if not frame.startswith(MAGIC) or len(frame) < len(HELLO):
        raise WireError("not this protocol (no optgraph rendezvous greeting)")
    (version,) = struct.unpack(">H", frame[len(MAGIC) : len(HELLO)])
    if version != VERSION:
        raise WireError(
            f"rendezvous protocol version {version}, this optgraph speaks {VERSION} (every rank "
            "must run the same optgraph)"
        )
    if len(frame) != size:
        raise WireError(f"a greeting of {len(frame)} bytes ({size} expected)")


def serve_peer(
    sock: socket.socket,
    secret: bytes,
    digest: bytes,
    ids_bytes: bytes,
    world: int,
    deadline: float | None = None,
) -> int:
    """Rank 0's side with one peer: the peer's rank once it proved the secret and got the ids.
    `WireError` for a peer that is not a rank of this run (nothing sent to it but a DENIED) or
    that has not finished by `deadline`; `OptGraphError` for a rank that proved the secret but
    compiled another program."""
    nonce0 = os.urandom(NONCE_BYTES)
    send_frame(sock, HELLO + nonce0)
    hello = receive_frame(sock, limit=HANDSHAKE_LIMIT, deadline=deadline)
    _check_hello(hello, PEER_HELLO_BYTES)
    at = len(HELLO)
    nonce1 = hello[at : at + NONCE_BYTES]
    rank_bytes = hello[at + NONCE_BYTES : at + NONCE_BYTES + 4]
    peer_digest = hello[at + NONCE_BYTES + 4 : at + NONCE_BYTES + 4 + DIGEST_BYTES]
    mac = hello[-32:]
    if not hmac.compare_digest(mac, _mac(secret, b"peer", nonce0, nonce1, rank_bytes, peer_digest)):
        send_frame(sock, DENIED)
        raise WireError("a peer without the run's secret")
    rank = int(struct.unpack(">I", rank_bytes)[0])
    reason = ANOTHER_PROGRAM if peer_digest != digest else None
    reason = reason or (NO_SUCH_RANK if not 0 < rank < world else None)
    if reason is not None:
        send_frame(sock, ERROR + reason + _mac(secret, b"rank0-error", nonce0, nonce1, reason))
    if reason == ANOTHER_PROGRAM:
        raise OptGraphError(
            f"rank 0: rank {rank} compiled another program (every rank must compile the same "
            "graph with the same pipeline)"
        )
    if reason == NO_SUCH_RANK:
        raise WireError(f"rank {rank} in a run of {world}")
    send_frame(sock, OK + ids_bytes + _mac(secret, b"rank0", nonce0, nonce1, ids_bytes))
    return rank


def ask_rank0(sock: socket.socket, secret: bytes, digest: bytes, rank: int, where: str) -> Ids:
    """A peer's side: prove the secret, check rank 0's proof, return the ids it sent."""
    try:
        hello = receive_frame(sock, limit=HANDSHAKE_LIMIT)
        _check_hello(hello, GREETING_BYTES)
        nonce0, nonce1 = hello[len(HELLO) :], os.urandom(NONCE_BYTES)
        rank_bytes = struct.pack(">I", rank)
        mac = _mac(secret, b"peer", nonce0, nonce1, rank_bytes, digest)
        send_frame(sock, HELLO + nonce1 + rank_bytes + digest + mac)
        answer = receive_frame(sock)
    except WireError as err:
        raise OptGraphError(f"rank {rank}: {where} is not a rank 0 to talk to ({err})") from None
    if answer == DENIED:  # not authenticated (a peer without the secret cannot be answered so)
        raise OptGraphError(
            f"rank {rank}: rank 0 on {where} refused this rank: its rendezvous secret differs "
            f"({KEY_VARIABLE} / {KEY_FILE_VARIABLE})"
        )
    head, body, mac = answer[:1], answer[1:-32], answer[-32:]
    is_error = len(answer) == 2 + 32 and head == ERROR and body in _REASONS
    is_ok = len(answer) >= 1 + 32 and head == OK
    label = b"rank0-error" if is_error else b"rank0"
    if not (is_error or is_ok) or not hmac.compare_digest(
        mac, _mac(secret, label, nonce0, nonce1, body)
    ):
        raise OptGraphError(
            f"rank {rank}: the rank 0 on {where} did not prove the run's secret: refused"
        )
    if is_error:
        raise OptGraphError(f"rank {rank}: {where}: {_REASONS[body]}")
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
        secret, where = _read_key_file(path), f"the key file '{path}'"
    elif environ.get(KEY_VARIABLE):
        secret, where = environ[KEY_VARIABLE].encode(), KEY_VARIABLE
    else:
        raise InputError(f"rendezvous: no secret: {HOW_TO_GIVE_A_SECRET}")
    check_secret(secret, where)
    return secret


HOW_TO_GIVE_A_SECRET = (
    f"set {KEY_VARIABLE} (or {KEY_FILE_VARIABLE}, a file only you can read) to the same "
    "random value for every rank, e.g. \"$(python -c 'import secrets; "
    "print(secrets.token_hex(32))')\""
)


def check_secret(secret: bytes, where: str) -> None:
    """An `InputError` unless `secret` is bytes and long enough to be one."""
    if not isinstance(secret, bytes) or len(secret) < MIN_SECRET_BYTES:
        size = f"{len(secret)} bytes" if isinstance(secret, bytes) else type(secret).__name__
        raise InputError(
            f"rendezvous: the secret in {where} is {size}; use at least {MIN_SECRET_BYTES} "
            f"random bytes: {HOW_TO_GIVE_A_SECRET}"
        )


def _read_key_file(path: str) -> bytes:
    """The key in `path`, checked on the file that is read (no swap between check and read)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError as err:
        raise InputError(f"rendezvous: cannot read the key file '{path}': {err.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise InputError(f"rendezvous: the key file '{path}' is not a regular file")
        if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise InputError(
                f"rendezvous: the key file '{path}' may be read by others "
                f"(mode {stat.S_IMODE(info.st_mode):o}); chmod 600 it"
            )
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            raise InputError(f"rendezvous: the key file '{path}' belongs to another user")
        data = b""
        while len(data) <= MAX_KEY_FILE_BYTES:
            chunk = os.read(fd, MAX_KEY_FILE_BYTES + 1 - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(fd)
    if len(data) > MAX_KEY_FILE_BYTES:
        raise InputError(
            f"rendezvous: the key file '{path}' holds more than {MAX_KEY_FILE_BYTES} bytes"
        )
    return data.strip()
