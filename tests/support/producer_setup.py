"""Producer identities for suites that run producers through the SDK or the ``bernstein`` CLI.

A deployment under test has the scheduler's keys (``install_keys``) and, separately, a
producer host's keys (``producer_keys``, ``bernstein keys init --producer``). The
manifest the scheduler runs with (``write_manifest``) takes config/roles.toml's roles and
registers that producer (every role, agent kind ``browser``) plus the deterministic test
identities of ``tests.support.producers`` (SDK-driven suites sign as whoever their records
name). ``trusted_keys`` pins what ``bernstein keys trust --manifest`` would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from bernstein.commands.keys import export_trust, manifest_snippet, producer_manifest_keys
from bernstein.consumers.core.model import ProducerRegistry
from bernstein.producers.identity import ProducerIdentity, SigningProducer
from bernstein.substrate.keys import InstallKeys, KeyPurpose, ProducerKeys, TrustedKey, TrustedKeys
from tests.support.producers import NAMES, producer, producer_signer, producer_trust, registry

REPO: Final = Path(__file__).resolve().parents[2]
ROLES_TOML: Final = REPO / "config" / "roles.toml"
PRODUCER_NAME: Final = "agents@test"
"""The producer name of the ``producer_keys`` fixture: what ``bernstein research|data|ops|browser run`` publish as."""
ALL_ROLES: Final = ["developer", "scout", "navigator", "analyst", "operator"]


def identity(name: str) -> ProducerIdentity:
    """The deterministic test identity of producer ``name`` (registered by every ``write_manifest``)."""
    return ProducerIdentity(name, producer_signer(name))


def write_manifest(path: Path, *producers: ProducerKeys, test_identities: bool = True) -> Path:
    """config/roles.toml's roles, ``producers`` with every role and ``browser``, and (by default) the test identities."""
    entries = [
        manifest_snippet(p.name, producer_manifest_keys(p.ring), roles=ALL_ROLES, agent_kinds=["browser"]) for p in producers
    ]
    if test_identities:
        taken = {p.name for p in producers}
        entries += [_identity_entry(identity(name)) for name in NAMES if name not in taken]
    text = ROLES_TOML.read_text(encoding="utf-8").rstrip() + "\n\n" + "\n\n".join(entries) + "\n"
    path.write_text(text, encoding="utf-8")
    return path


def _identity_entry(producer: SigningProducer) -> str:
    key = {
        "public_key": producer.signer.public_key_raw.hex(),
        "key_id": producer.signer.key_id,
        "valid_from_ms": 0,
        "valid_until_ms": None,
        "status": "active",
    }
    return manifest_snippet(producer.name, [key], roles=ALL_ROLES, agent_kinds=["browser"])


def trusted_keys(keys: InstallKeys, manifest: Path, *, include_audit_key: bool = True) -> TrustedKeys:
    """The scheduler's seal and audit keys and every producer key of ``manifest`` (``keys trust --manifest``)."""
    return export_trust(keys.key_ring, manifest, include_audit_key=include_audit_key)


def registry_of(*producers: SigningProducer) -> ProducerRegistry:
    """A scheduler's registry for in-process tests: the test identities and ``producers``, each with every grant."""
    names = [name for name in NAMES if name not in {p.name for p in producers}]
    return registry(*names, extra=[producer(p.name, signer=p.signer) for p in producers])


def trust_of(keys: InstallKeys, *producers: SigningProducer) -> TrustedKeys:
    """The scheduler's keys, the test identities and ``producers``, pinned as ``keys trust --manifest`` would."""
    pinned = TrustedKeys.of(
        TrustedKey(p.signer.key_id, KeyPurpose.PRODUCER, p.signer.public_key_raw, producer=p.name) for p in producers
    )
    names = [name for name in NAMES if name not in {p.name for p in producers}]
    return TrustedKeys.from_install(keys).merged(producer_trust(*names)).merged(pinned)
