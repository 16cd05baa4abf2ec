"""Witness policies in the C2SP ``tlog-policy`` syntax (c2sp.org/tlog-policy): which witnesses must cosign.

A policy names logs (optional here: a partition log's key follows from the pinned seal key),
witnesses by name and cosignature/v1 vkey, groups (``all``, ``any`` or ``k`` of their members) and
exactly one ``quorum``. A checkpoint meets it when the witnesses whose cosignatures verified
satisfy the quorum. Parsing is strict (``MalformedPolicy`` names the line): names defined before
use, each member listed once, ``1 <= k <= n``, no duplicate keys, only tab, newline and printable
octets. Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from bernstein.schemas.errors import MalformedInput
from bernstein.schemas.notes import SIG_COSIGNATURE_V1, SIG_ED25519, NoteVerifier, OpenedNote

NONE: Final = "none"
MAX_ENTRIES: Final = 256
"""Logs, witnesses and groups each (the spec asks implementations for at least 32)."""


class MalformedPolicy(MalformedInput):
    """Text that is no tlog-policy this code accepts."""

    code = "E_MALFORMED_TLOG_POLICY"


@dataclass(frozen=True, slots=True)
class Group:
    """``k`` of ``members`` (witness or group names) must have witnessed."""

    k: int
    members: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Policy:
    """A parsed policy: log and witness verifiers, groups and the quorum's name (``none``: no cosignature needed)."""

    logs: tuple[NoteVerifier, ...]
    witnesses: dict[str, NoteVerifier]
    groups: dict[str, Group]
    quorum: str
    text: str

    def witnessed_by(self, opened: OpenedNote) -> frozenset[str]:
        """The policy's witnesses whose cosignature is among the note's verified signatures."""
        verified = {(sig.name, sig.key_id) for sig in opened.verified}
        return frozenset(name for name, v in self.witnesses.items() if (v.name, v.key_id) in verified)

    def satisfied(self, witnessed: frozenset[str]) -> bool:
        """Whether these witnesses meet the quorum: each group decided once, in definition order (members come first)."""
        met: dict[str, bool] = {name: name in witnessed for name in self.witnesses}
        for name, group in self.groups.items():
            met[name] = sum(met[member] for member in group.members) >= group.k
        return self.quorum == NONE or met[self.quorum]

    def describe(self) -> str:
        """The quorum in words, for reports: ``2 of (w1, w2, w3)``."""
        return self._words(self.quorum)

    def _words(self, name: str) -> str:
        if name == NONE:
            return "no witness"
        group = self.groups.get(name)
        if group is None:
            return name
        return f"{group.k} of ({', '.join(self._words(m) for m in group.members)})"


def parse_policy(text: str | bytes) -> Policy:
    """Parse a tlog-policy strictly; ``MalformedPolicy`` (with the line number) for anything else."""
    data = text.encode("utf-8") if isinstance(text, str) else bytes(text)
    bad = next((b for b in data if b < 0x20 and b not in (0x09, 0x0A) or b == 0x7F), None)
    if bad is not None:
        raise MalformedPolicy(f"a policy holds only tab, newline and printable characters, found byte 0x{bad:02x}")
    logs: list[NoteVerifier] = []
    witnesses: dict[str, NoteVerifier] = {}
    groups: dict[str, Group] = {}
    quorum: str | None = None
    keys: set[bytes] = set()
    for number, raw in enumerate(data.decode("utf-8", errors="surrogateescape").split("\n"), 1):
        words = [word for word in raw.replace("\t", " ").split(" ") if word]  # the spec's whitespace: space and tab only
        if not words or words[0].startswith("#"):
            continue

        def fail(why: str, number: int = number) -> MalformedPolicy:
            return MalformedPolicy(f"policy line {number}: {why}")

        keyword, args = words[0], words[1:]
        if keyword == "log":
            if len(args) not in (1, 2):
                raise fail("'log <vkey> [<url>]'")
            verifier = _vkey(args[0], SIG_ED25519, fail)
            _unique_key(verifier, keys, fail)
            logs.append(verifier)
        elif keyword == "witness":
            if len(args) not in (2, 3):
                raise fail("'witness <name> <vkey> [<url>]'")
            name = args[0]
            if name == NONE or name in witnesses or name in groups:
                raise fail(f"the name {name!r} is taken")
            verifier = _vkey(args[1], SIG_COSIGNATURE_V1, fail)
            _unique_key(verifier, keys, fail)
            witnesses[name] = verifier
        elif keyword == "group":
            if len(args) < 3:
                raise fail("'group <name> all|any|<k> <member>...'")
            name, threshold, members = args[0], args[1], tuple(args[2:])
            if name == NONE or name in witnesses or name in groups:
                raise fail(f"the name {name!r} is taken")
            for member in members:
                if member not in witnesses and member not in groups:
                    raise fail(f"group member {member!r} is not a witness or group defined above")
            if len(set(members)) != len(members):
                raise fail("a group lists each member once")
            groups[name] = Group(_threshold(threshold, len(members), fail), members)
        elif keyword == "quorum":
            if len(args) != 1:
                raise fail("'quorum <name>'")
            if quorum is not None:
                raise fail("a policy has exactly one quorum line")
            if args[0] != NONE and args[0] not in witnesses and args[0] not in groups:
                raise fail(f"the quorum {args[0]!r} is not a witness or group defined above")
            quorum = args[0]
        else:
            raise fail(f"unknown keyword {keyword[:40]!r} (log, witness, group, quorum)")
        if max(len(logs), len(witnesses), len(groups)) > MAX_ENTRIES:
            raise fail(f"at most {MAX_ENTRIES} logs, witnesses and groups each")
    if quorum is None:
        raise MalformedPolicy("a policy has exactly one quorum line ('quorum none' asks for no cosignature)")
    return Policy(tuple(logs), witnesses, groups, quorum, data.decode("utf-8", errors="replace"))


def _vkey(text: str, sig_type: int, fail: Callable[[str], MalformedPolicy]) -> NoteVerifier:
    try:
        verifier = NoteVerifier.from_vkey(text)
    except MalformedInput as exc:
        raise fail(f"not a verifier key: {exc}") from None
    if verifier.sig_type != sig_type:
        kind = "an Ed25519 log key (type 0x01)" if sig_type == SIG_ED25519 else "a cosignature/v1 key (type 0x04)"
        raise fail(f"{verifier.name!r} is not {kind}")
    return verifier


def _unique_key(verifier: NoteVerifier, keys: set[bytes], fail: Callable[[str], MalformedPolicy]) -> None:
    if verifier.public_key in keys:
        raise fail("a public key is listed twice")
    keys.add(verifier.public_key)


def _threshold(text: str, n: int, fail: Callable[[str], MalformedPolicy]) -> int:
    if text == "all":
        return n
    if text == "any":
        return 1
    if not (text.isascii() and text.isdigit()) or len(text) > 4 or text.startswith("0") or not 1 <= int(text) <= n:
        raise fail(f"a group's threshold is all, any or a decimal k with 1 <= k <= {n}, got {text[:20]!r}")
    return int(text)
