"""RFC 6962 / RFC 9162 Merkle tree hashing, a compact frontier and inclusion and consistency proofs.

Pure functions over 32-byte SHA-256 hashes: no I/O, no clock, no randomness. The rules are
those of RFC 9162 section 2.1 (the same as RFC 6962 section 2.1, which Certificate
Transparency, the Go checksum database, Sigstore and the C2SP ``tlog-*`` formats use):

- a leaf's hash is ``SHA-256(0x00 || leaf)`` (``leaf_hash``), an interior node's
  ``SHA-256(0x01 || left || right)`` (``node_hash``), the empty tree's root ``SHA-256("")``
  (``EMPTY_ROOT``);
- a tree of ``n > 1`` leaves splits at ``k``, the largest power of two smaller than ``n``.

Everything else here works on *leaf hashes*: what a leaf is (its domain-tagged encoding) is
the caller's business.

``Frontier`` is the tree's state in O(log n): the roots of the perfect subtrees that make up
``[0, n)`` (a "compact range"), largest first, one for each set bit of ``n``. ``append`` adds
one leaf hash (amortised O(1) hashes, O(log n) at worst), ``root`` folds the frontier from the
right. Its byte form (``Frontier.encode``) is deterministic, so two implementations can be
held to the same bytes::

    0x01 (version) || size (8 bytes, big endian) || popcount(size) x 32-byte subtree roots

``Frontier.decode`` refuses anything else (wrong version, wrong length, trailing bytes) with
``MalformedFrontier``.

Proofs: ``inclusion_proof`` and ``consistency_proof`` make them from all the leaf hashes
(RFC 9162 2.1.3.1 and 2.1.4.1); ``verify_inclusion`` and ``verify_consistency`` check them by
the algorithms of RFC 9162 2.1.3.2 and 2.1.4.2. The verifiers' contract:

- they return ``True`` when the proof proves the claim and ``False`` when a well-formed proof
  does not (a hash that does not chain to the root: a changed leaf, root or path);
- they raise ``MalformedProof`` when the question or the proof is malformed: a size or index
  that is not an ``int`` in ``[0, 2**64)``, an index at or beyond the size, a first size
  greater than the second, a hash that is not exactly 32 bytes, or a path whose length is not
  the one the sizes determine. Nothing else is raised, whatever the input.

``consistency_old_root`` runs the consistency check's reconstruction without the old root: given the new root, it
returns the old root the path derives (None when the path does not reproduce the new root); ``verify_consistency``
compares that with the old root it is given. A path that reproduces a signed new root thus names the true root of
that tree's prefix, which is how a proof of rewriting (``bernstein.verifier.rewriting``) shows that another signed
root of the prefix's size is not it. Its path is ``consistency_path``'s: the proof, with the old root in front for
an old size that is a power of two (RFC 9162 2.1.4.2 step 2).

Consistency from the empty tree (``size1 == 0``): RFC 9162 defines no proof for it; here the
proof must be empty and the answer is whether ``root1`` is ``EMPTY_ROOT`` (the empty tree is a
prefix of every tree, as the C2SP ``tlog-witness`` protocol has it). Consistency of a tree with
itself (``size1 == size2``) needs an empty proof and equal roots.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from bernstein.schemas.errors import MalformedInput

HASH_SIZE: Final = 32
"""Bytes in every hash here (SHA-256)."""

MAX_SIZE: Final = 2**64 - 1
"""The largest tree size (and the largest index plus one): sizes are unsigned 64-bit, as in every CT log."""

EMPTY_ROOT: Final = hashlib.sha256(b"").digest()
"""The root of the empty tree (RFC 9162 2.1.1: the hash of the empty string)."""

FRONTIER_VERSION: Final = 1
"""The first byte of ``Frontier.encode``'s output."""

_LEAF_PREFIX: Final = b"\x00"
_NODE_PREFIX: Final = b"\x01"


class MalformedProof(MalformedInput):
    """A proof, hash or tree size that cannot be checked at all (wrong length, out of range)."""

    code = "E_MALFORMED_PROOF"


class MalformedFrontier(MalformedInput):
    """Bytes (or values) that are not a frontier: wrong version, length, size or hash length."""

    code = "E_MALFORMED_FRONTIER"


# --------------------------------------------------------------------------
# Hashing
# --------------------------------------------------------------------------


def leaf_hash(leaf: bytes) -> bytes:
    """``SHA-256(0x00 || leaf)``: the hash of one leaf's bytes."""
    return hashlib.sha256(_LEAF_PREFIX + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``: the hash of an interior node."""
    return hashlib.sha256(_NODE_PREFIX + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than ``n`` (``n > 1``)."""
    return 1 << ((n - 1).bit_length() - 1)


def _subtree_root(hashes: Sequence[bytes], start: int, end: int) -> bytes:
    """MTH of ``hashes[start:end]`` (non-empty), by the frontier: O(end - start) hashes, no recursion."""
    stack: list[tuple[int, bytes]] = []  # (height, root) of perfect subtrees, largest first
    for i in range(start, end):
        height, value = 0, hashes[i]
        while stack and stack[-1][0] == height:
            value = node_hash(stack.pop()[1], value)
            height += 1
        stack.append((height, value))
    value = stack.pop()[1]
    while stack:
        value = node_hash(stack.pop()[1], value)
    return value


def root(leaf_hashes: Sequence[bytes]) -> bytes:
    """The Merkle tree hash (MTH) of a list of leaf hashes; ``EMPTY_ROOT`` for none."""
    _require_hashes(leaf_hashes, "leaf hash", MalformedProof)
    if not leaf_hashes:
        return EMPTY_ROOT
    return _subtree_root(leaf_hashes, 0, len(leaf_hashes))


# --------------------------------------------------------------------------
# The frontier (compact range [0, n))
# --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Frontier:
    """The roots of the perfect subtrees that make up a tree of ``size`` leaves, largest first.

    Immutable: ``append`` and ``extend`` return a new frontier (the caller keeps the old one
    for an undo). ``nodes[i]`` is the root of the subtree of ``2**h`` leaves for the ``i``-th
    set bit ``h`` of ``size``, from the most significant. Constructing one with nodes that do
    not match the size raises ``MalformedFrontier``."""

    size: int = 0
    nodes: tuple[bytes, ...] = ()

    def __post_init__(self) -> None:
        if type(self.size) is not int or not 0 <= self.size <= MAX_SIZE:
            raise MalformedFrontier(f"a frontier's size is an integer in [0, 2**64), got {self.size!r}")
        if type(self.nodes) is not tuple:
            raise MalformedFrontier("a frontier's nodes are a tuple of 32-byte hashes")
        if len(self.nodes) != self.size.bit_count():
            raise MalformedFrontier(
                f"a frontier of size {self.size} has {self.size.bit_count()} subtree roots, got {len(self.nodes)}"
            )
        _require_hashes(self.nodes, "frontier node", MalformedFrontier)

    @classmethod
    def of(cls, leaf_hashes: Iterable[bytes]) -> Frontier:
        """The frontier of a tree of these leaf hashes."""
        return cls().extend(leaf_hashes)

    def append(self, leaf_hash_value: bytes) -> Frontier:
        """The frontier after one more leaf (its hash, 32 bytes): merges equal-sized subtrees."""
        if type(leaf_hash_value) is not bytes or len(leaf_hash_value) != HASH_SIZE:
            raise MalformedFrontier(f"a leaf hash has {HASH_SIZE} bytes")
        if self.size == MAX_SIZE:
            raise MalformedFrontier("the tree is full (2**64 - 1 leaves)")
        nodes = list(self.nodes)
        value = leaf_hash_value
        size = self.size
        while size & 1:  # each trailing set bit of the old size is a subtree the new leaf completes
            value = node_hash(nodes.pop(), value)
            size >>= 1
        nodes.append(value)
        return _checked_already(self.size + 1, tuple(nodes))

    def extend(self, leaf_hashes: Iterable[bytes]) -> Frontier:
        """The frontier after appending each of ``leaf_hashes`` in order."""
        frontier = self
        for value in leaf_hashes:
            frontier = frontier.append(value)
        return frontier

    def root(self) -> bytes:
        """The tree's root: the subtree roots folded from the right; ``EMPTY_ROOT`` for size 0."""
        if not self.nodes:
            return EMPTY_ROOT
        value = self.nodes[-1]
        for node in reversed(self.nodes[:-1]):
            value = node_hash(node, value)
        return value

    def encode(self) -> bytes:
        """``0x01 || size (u64 big endian) || nodes``: deterministic, ``decode`` reads it back."""
        return bytes([FRONTIER_VERSION]) + self.size.to_bytes(8, "big") + b"".join(self.nodes)

    @classmethod
    def decode(cls, data: bytes) -> Frontier:
        """Parse ``encode``'s bytes; anything else raises ``MalformedFrontier``."""
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise MalformedFrontier(f"a frontier is bytes, got {type(data).__name__}")
        raw = bytes(data)
        if len(raw) < 9:
            raise MalformedFrontier(f"a frontier has at least 9 bytes, got {len(raw)}")
        if raw[0] != FRONTIER_VERSION:
            raise MalformedFrontier(f"unknown frontier version {raw[0]} (this code reads {FRONTIER_VERSION})")
        size = int.from_bytes(raw[1:9], "big")
        if size > MAX_SIZE:  # pragma: no cover - eight bytes cannot hold more
            raise MalformedFrontier("frontier size out of range")
        expected = 9 + HASH_SIZE * size.bit_count()
        if len(raw) != expected:
            raise MalformedFrontier(f"a frontier of size {size} has {expected} bytes, got {len(raw)}")
        nodes = tuple(raw[i : i + HASH_SIZE] for i in range(9, expected, HASH_SIZE))
        return cls(size, nodes)


def _checked_already(size: int, nodes: tuple[bytes, ...]) -> Frontier:
    """A frontier ``append`` derived from a valid one (so valid by construction), without re-checking every node:
    the scheduler appends once per journal record."""
    frontier = object.__new__(Frontier)
    object.__setattr__(frontier, "size", size)
    object.__setattr__(frontier, "nodes", nodes)
    return frontier


# --------------------------------------------------------------------------
# Proofs: making them (RFC 9162 2.1.3.1 and 2.1.4.1)
# --------------------------------------------------------------------------


def inclusion_proof(leaf_hashes: Sequence[bytes], index: int) -> list[bytes]:
    """The audit path of leaf ``index`` in the tree of all ``leaf_hashes`` (RFC 9162 2.1.3.1 PATH).

    From the leaf's sibling up to the root's child; O(n) hashes. Raises ``MalformedProof`` for
    an index outside the tree or a hash that is not 32 bytes."""
    _require_hashes(leaf_hashes, "leaf hash", MalformedProof)
    size = len(leaf_hashes)
    _require_int(index, "leaf index")
    if not 0 <= index < size:
        raise MalformedProof(f"leaf index {index} is outside a tree of {size} leaves")
    path: list[bytes] = []
    start, end, m = 0, size, index
    while end - start > 1:  # PATH(m, D[start:end]), iteratively: the sibling subtree's root, then descend
        k = _split(end - start)
        if m < k:
            path.append(_subtree_root(leaf_hashes, start + k, end))
            end = start + k
        else:
            path.append(_subtree_root(leaf_hashes, start, start + k))
            start, m = start + k, m - k
    path.reverse()
    return path


def consistency_proof(leaf_hashes: Sequence[bytes], old_size: int) -> list[bytes]:
    """The proof that the tree of the first ``old_size`` leaf hashes is a prefix of the tree of all
    of them (RFC 9162 2.1.4.1 PROOF(m, D[n])).

    Empty when ``old_size`` is 0 or the whole size. Raises ``MalformedProof`` for an old size
    outside ``[0, len(leaf_hashes)]`` or a hash that is not 32 bytes."""
    _require_hashes(leaf_hashes, "leaf hash", MalformedProof)
    size = len(leaf_hashes)
    _require_int(old_size, "old size")
    if not 0 <= old_size <= size:
        raise MalformedProof(f"old size {old_size} is outside [0, {size}]")
    if old_size in (0, size):
        return []
    proof: list[bytes] = []
    # SUBPROOF(m, D[start:end], b), iteratively; b is True while the subtree is the old tree's own.
    start, end, m, whole = 0, size, old_size, True
    while True:
        n = end - start
        if m == n:
            if not whole:
                proof.append(_subtree_root(leaf_hashes, start, end))
            break
        k = _split(n)
        if m <= k:
            proof.append(_subtree_root(leaf_hashes, start + k, end))
            end = start + k
        else:
            proof.append(_subtree_root(leaf_hashes, start, start + k))
            start, m, whole = start + k, m - k, False
    proof.reverse()
    return proof


# --------------------------------------------------------------------------
# Proofs: checking them (RFC 9162 2.1.3.2 and 2.1.4.2)
# --------------------------------------------------------------------------


def inclusion_proof_length(index: int, size: int) -> int:
    """How many hashes the inclusion proof of leaf ``index`` in a tree of ``size`` has (``index < size``)."""
    inner = (index ^ (size - 1)).bit_length()  # levels below the node where the paths to index and size-1 part
    return inner + (index >> inner).bit_count()


def consistency_proof_length(size1: int, size2: int) -> int:
    """How many hashes the consistency proof from ``size1`` to ``size2`` has (``0 <= size1 <= size2``)."""
    if size1 in (0, size2):
        return 0
    shift = (size1 & -size1).bit_length() - 1  # trailing zero bits of size1: the first node's height
    inner = ((size1 - 1) ^ (size2 - 1)).bit_length()
    border = ((size1 - 1) >> inner).bit_count()
    seed = 0 if size1 == 1 << shift else 1  # a power of two: the old root itself starts the chain
    return seed + inner - shift + border


def verify_inclusion(leaf_hash_value: bytes, index: int, size: int, proof: Sequence[bytes], root_hash: bytes) -> bool:
    """True when ``proof`` shows the leaf hash at ``index`` in the tree of ``size`` whose root is ``root_hash``.

    RFC 9162 2.1.3.2. False for a well-formed proof that does not chain to ``root_hash``;
    ``MalformedProof`` for an index or size out of range, a hash that is not 32 bytes, or a
    path of the wrong length for ``(index, size)``."""
    _require_int(index, "leaf index")
    _require_int(size, "tree size")
    if not 0 <= index < size:
        raise MalformedProof(f"leaf index {index} is outside a tree of {size} leaves")
    _require_hash(leaf_hash_value, "leaf hash")
    _require_hash(root_hash, "root hash")
    path = _require_path(proof)
    expected = inclusion_proof_length(index, size)
    if len(path) != expected:
        raise MalformedProof(f"an inclusion proof for leaf {index} of {size} has {expected} hashes, got {len(path)}")
    fn, sn, r = index, size - 1, leaf_hash_value
    for p in path:
        if sn == 0:  # cannot happen once the length is right; the RFC's step kept for fidelity
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root_hash


def verify_consistency(size1: int, size2: int, root1: bytes, root2: bytes, proof: Sequence[bytes]) -> bool:
    """True when ``proof`` shows the tree of ``size1`` with root ``root1`` is a prefix of the tree of
    ``size2`` with root ``root2``.

    RFC 9162 2.1.4.2 for ``0 < size1 < size2``; equal sizes need an empty proof and equal roots;
    ``size1 == 0`` needs an empty proof and ``root1 == EMPTY_ROOT``. False for a well-formed
    proof that does not chain to both roots; ``MalformedProof`` for sizes out of range or out of
    order, a hash that is not 32 bytes, or a proof of the wrong length for the sizes."""
    _require_int(size1, "first tree size")
    _require_int(size2, "second tree size")
    if not 0 <= size1 <= MAX_SIZE or not 0 <= size2 <= MAX_SIZE:
        raise MalformedProof(f"tree sizes are in [0, 2**64), got {size1} and {size2}")
    if size1 > size2:
        raise MalformedProof(f"the first tree ({size1} leaves) is larger than the second ({size2})")
    _require_hash(root1, "first root hash")
    _require_hash(root2, "second root hash")
    path = _require_path(proof)
    expected = consistency_proof_length(size1, size2)
    if len(path) != expected:
        raise MalformedProof(f"a consistency proof from {size1} to {size2} has {expected} hashes, got {len(path)}")
    if _seeded(size1, size2):  # step 2: a power of two, so the old root starts the chain
        path = [root1, *path]
    return consistency_old_root(size1, size2, path, root2) == root1


def consistency_path(leaf_hashes: Sequence[bytes], old_size: int) -> list[bytes]:
    """The consistency proof from ``old_size`` to all of ``leaf_hashes`` as ``consistency_old_root`` takes it: RFC 9162's
    PROOF(m, D[n]), with the old tree's root in front when ``old_size`` is a power of two below the size (step 2 of
    RFC 9162 2.1.4.2 puts it there; a verifier that knows the old root has no need to be sent it)."""
    proof = consistency_proof(leaf_hashes, old_size)
    if _seeded(old_size, len(leaf_hashes)):
        return [_subtree_root(leaf_hashes, 0, old_size), *proof]
    return proof


def consistency_path_length(size1: int, size2: int) -> int:
    """How many hashes ``consistency_path`` (and ``consistency_old_root``) has from ``size1`` to ``size2``."""
    return consistency_proof_length(size1, size2) + (1 if _seeded(size1, size2) else 0)


def consistency_old_root(size1: int, size2: int, path: Sequence[bytes], root2: bytes) -> bytes | None:
    """The root of the first ``size1`` leaves of the tree of ``size2`` leaves whose root is ``root2``, as ``path``
    derives it; None when ``path`` does not reproduce ``root2``.

    ``path`` is ``consistency_path``'s: the RFC 9162 2.1.4.2 consistency path after its step 2 (the proof, with
    the old root in front for a power-of-two ``size1`` below ``size2``). The RFC's loop folds it into the old root
    and the new one at once; when the new one is ``root2``, the old one is, by SHA-256's collision resistance, the
    true root of that tree's first ``size1`` leaves, whoever made the path. ``EMPTY_ROOT`` for ``size1`` 0 and
    ``root2`` itself for equal sizes (both with an empty path). ``MalformedProof`` as for ``verify_consistency``:
    sizes out of range or out of order, a hash that is not 32 bytes, a path of another length than
    ``consistency_path_length``."""
    _require_int(size1, "first tree size")
    _require_int(size2, "second tree size")
    if size1 > size2:
        raise MalformedProof(f"the first tree ({size1} leaves) is larger than the second ({size2})")
    _require_hash(root2, "second root hash")
    hashes = _require_path(path)
    expected = consistency_path_length(size1, size2)
    if len(hashes) != expected:
        raise MalformedProof(f"a consistency path from {size1} to {size2} has {expected} hashes, got {len(hashes)}")
    if size1 == 0:
        return EMPTY_ROOT
    if size1 == size2:
        return root2
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:  # step 4
        fn >>= 1
        sn >>= 1
    fr = sr = hashes[0]
    for c in hashes[1:]:
        if sn == 0:  # cannot happen once the length is right; the RFC's step kept for fidelity
            return None
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if not fn & 1:
                while fn and not fn & 1:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return fr if sr == root2 and sn == 0 else None


def _seeded(size1: int, size2: int) -> bool:
    """Whether RFC 9162 2.1.4.2 step 2 puts the old root in front of the proof: ``size1`` a power of two below ``size2``."""
    return 0 < size1 < size2 and size1 & (size1 - 1) == 0


# --------------------------------------------------------------------------
# Checks of hostile input
# --------------------------------------------------------------------------


def _require_int(value: object, what: str) -> None:
    if type(value) is not int or not 0 <= value <= MAX_SIZE:
        raise MalformedProof(f"{what} is an integer in [0, 2**64), got {value!r}")


def _require_hash(value: object, what: str) -> None:
    if type(value) is not bytes or len(value) != HASH_SIZE:
        shown = f"{len(value)} bytes" if isinstance(value, bytes) else type(value).__name__
        raise MalformedProof(f"{what} is {HASH_SIZE} bytes, got {shown}")


def _require_hashes(values: object, what: str, error: type[MalformedInput]) -> None:
    if not isinstance(values, Sequence) or isinstance(values, (bytes, str)):
        raise error(f"expected a sequence of {HASH_SIZE}-byte values ({what})")
    for i, value in enumerate(values):
        if type(value) is not bytes or len(value) != HASH_SIZE:
            raise error(f"{what} {i} is not {HASH_SIZE} bytes")


def _require_path(proof: object) -> list[bytes]:
    if not isinstance(proof, Sequence) or isinstance(proof, (bytes, str)):
        raise MalformedProof(f"a proof is a sequence of {HASH_SIZE}-byte hashes")
    if len(proof) > 2 * 64:  # no proof over 2**64 leaves is longer; refuse before touching the rest
        raise MalformedProof(f"a proof has at most 128 hashes, got {len(proof)}")
    path = list(proof)
    for i, value in enumerate(path):
        if type(value) is not bytes or len(value) != HASH_SIZE:
            raise MalformedProof(f"proof hash {i} is not {HASH_SIZE} bytes")
    return path
