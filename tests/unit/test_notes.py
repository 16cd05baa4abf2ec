"""C2SP signed notes, checkpoints and cosignature/v1 (``bernstein.schemas.notes``) against published vectors.

Sources, copied byte for byte:

- golang.org/x/mod ``sumdb/note/note_test.go`` (github.com/golang/mod): the "PeterNeumann" and
  "EnochRoot" keys, the signed note both sign, the key manglings ``NewVerifier`` refuses and the
  malformed notes ``Open`` refuses.
- c2sp.org/signed-note (github.com/C2SP/C2SP ``signed-note.md``): the ``example.com/foo`` vkey and
  the note it verifies; c2sp.org/tlog-checkpoint and /tlog-cosignature: the
  ``example.com/behind-the-sofa`` checkpoint, its cosignature line and the signed message the
  spec prints for it (``time 1679315147``).
- github.com/transparency-dev/formats ``log/note_test.go``: a real sum.golang.org checkpoint with
  the Go checksum database's vkey, and the "monkeys", "bananas" and "witness" keys that also
  sign it; ``note/note_cosigv1_test.go``: a cosignature/v1 vkey in use (``remora.n621.de``), a
  cosignature's timestamp (1727964367) and vkeys that must be refused.

No cosignature/v1 with a published key and signature was found, so the cosignature is checked by
a round trip with fixed seeds and a hand-checked byte layout (key id, timestamp, the exact signed
message verified with ``cryptography`` directly). Hypothesis (fixed seed) mutates signed notes
and feeds arbitrary bytes: only the typed errors come out, and no changed text is accepted.
"""

from __future__ import annotations

import base64
import hashlib

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from hypothesis import given, settings
from hypothesis import strategies as st

from bernstein.schemas import notes
from bernstein.schemas.errors import MalformedInput
from bernstein.schemas.merkle import EMPTY_ROOT, Frontier, leaf_hash
from bernstein.schemas.notes import (
    MAX_SIGNATURES,
    SIG_COSIGNATURE_V1,
    SIG_ED25519,
    AmbiguousVerifiers,
    Checkpoint,
    InvalidNoteSignature,
    MalformedCheckpoint,
    MalformedNote,
    MalformedVerifierKey,
    Note,
    NoteRejected,
    NoteSigner,
    NoteVerifier,
    Signature,
    UnverifiedNote,
    add_signatures,
    cosignature_message,
    cosignature_timestamp,
    open_checkpoint,
    open_note,
    parse_checkpoint,
    parse_note,
    sign_note,
)
from tests.support.fuzz import EDITS, mutate

# golang.org/x/mod sumdb/note/note_test.go
PETER_VKEY = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW"
PETER_SKEY = "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz"
ENOCH_VKEY = "EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop"
TEXT = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n"
PETER_SIG = "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n"
ENOCH_SIG = "— EnochRoot rwz+eBzmZa0SO3NbfRGzPCpDckykFXSdeX+MNtCOXm2/5n2tiOHp+vAF1aGrQ5ovTG01oOTGwnWLox33WWd1RvMc+QQ=\n"

# c2sp.org/signed-note, "Verifier keys", "Example"
C2SP_VKEY = "example.com/foo+530d903a+AekyeRrm56hApGFkyQR4ZCbV54Id2LKaANYcrnKv3U2k"
C2SP_NOTE = (
    "This is an example message.\n\n"
    "— example.com/foo Uw2QOkn8srV1yJGh2VYRlL1Tnagv1YEq6TfXppzi2ONncAlTgK7Ztg1ERYNZXsYjOBH3mFXmRKuwHjG1Yu72IneyaQM=\n"
)

# c2sp.org/tlog-cosignature, the example checkpoint with a cosignature, and its "Ed25519 signed message" example
C2SP_COSIGNED = (
    "example.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n\n"
    "— example.com/behind-the-sofa Az3grlgtzPICa5OS8npVmf1Myq/5IZniMp+ZJurmRDeOoRDe4URYN7u5/Zhcyv2q1gGzGku9nTo+zyWE+xeMcTOAYQ8=\n"
    "— witness.example.com/w1 jWbPPwAAAABkGFDLEZMHwSRaJNiIDoe9DYn/zXcrtPHeolMI5OWXEhZCB9dlrDJsX3b2oyin1nPZ"
    "qhf5nNo0xUe+mbIUBkBIfZ+qnA==\n"
)
C2SP_SIGNED_MESSAGE = (
    "cosignature/v1\ntime 1679315147\nexample.com/behind-the-sofa\n20852163\nCsUYapGGPo4dkMgIAUqom/Xajj7h2fB2MPA3j2jxq2I=\n"
)

# transparency-dev/formats log/note_test.go (TestSumDBNoteParsing, BenchmarkParse)
SUMDB_VKEY = "sum.golang.org+033de0ae+Ac4zctda0e5eza+HJyk9SxEdh+s3Ux18htTTAD8OuAn8"
SUMDB_CHECKPOINT = (
    "go.sum database tree\n6476701\nmb8QLQIs0Z0yP5Cstq6guj87oXWeC9gEM8oVikmm9Wk=\n\n"
    "— sum.golang.org Az3grsLX85Gz+s1SiTbgkuqxgItqFq7gsMUEyVnrsa9LM7Us9S+1xbFIGu95949rj4nPRYfvimWEPWL+o3GeoWwOoAw=\n"
)
EXTRA_VKEYS = [
    "monkeys+db4d9f7e+AULaJMvTtDLHPUcUrjdDad9vDlh/PTfC2VV60JUtCfWT",
    "bananas+cf639f13+AaPjhFnPCQnid/Ql32KWhmh+uk72FVRfK+2DLmO3BI3M",
    "witness+f13a86db+AdYV1Ztajd9BvyjP2HgpwrqYL6TjOwIjGMOq8Bu42xbN",
]
EXTRA_SIGS = [
    "— monkeys 202ffh9ve46Mqbhuyb4wnC2Pwdan5EsXQym/tF1ggXJqhjGosU4T5intH4iKMRgDLxrnXuIjRaU2NbvAnaepM6Y+8ww=\n",
    "— bananas z2OfE+2bbsBZ7NLgfuslc0v7NFW2QyexJ7fhePpoL2N/P7N/COd5S+JNHbQEAlYzz2C5sg0E+x/MggS1mDR6t3/9rQw=\n",
    "— witness 8TqG25yWGFLdT7WPf/WoyeG3LwqtkXP+8S3yykOVm6EMh4hPgCke6eSVPU4BdtXNMPJBXKF+UpDbGgCdcpR8SVSoqAU=\n",
]

# transparency-dev/formats note/note_cosigv1_test.go (TestCoSigV1NewVerifier, TestCoSigV1Timestamp)
REMORA_COSIG_VKEY = "remora.n621.de+da77ade7+BOvN63jn/bLvkieywe8R6UYAtVtNbZpXh34x7onlmtw2"
TEST_ED25519_VKEY = "TEST+7997405c+AQcC+FTVKf0jlTdHDY3rbevmnKxxPjigCXlVtGe6RIr6"
COSIG_WITH_TIME = "ZGhGuQAAAABm/qTPeyKXD+R2rzyQsxPiP8mXum7qq/iF0u4vanlqJyocWODBt97w9uL+8qT7S5gxEHWWOworDcFiEBYJXORmnFBOBA=="
PLAIN_SIG = "eQjRQm6eSKzFoiYalgwCPXu2y3ijtg68is9M46JKxuZB+dRfTmeQeDBoXnvxZx2ugnkyV+MUMLXpWs1hPb/W/4xkNQY="

LOG_SEED = hashlib.sha256(b"bernstein test log key").digest()
WITNESS_SEED = hashlib.sha256(b"bernstein test witness key").digest()
LOG = NoteSigner("example.com/bernstein/p0", SIG_ED25519, LOG_SEED)
WITNESS = NoteSigner("witness.example/w1", SIG_COSIGNATURE_V1, WITNESS_SEED)
TIME = 1_700_000_000


def _peter() -> NoteVerifier:
    return NoteVerifier.from_vkey(PETER_VKEY)


def _enoch() -> NoteVerifier:
    return NoteVerifier.from_vkey(ENOCH_VKEY)


def _checkpoint(size: int = 5) -> Checkpoint:
    frontier = Frontier.of(leaf_hash(b"entry %d" % i) for i in range(size))
    return Checkpoint("example.com/bernstein/p0", size, frontier.root(), ("epoch 3",))


# --------------------------------------------------------------------------
# sumdb/note's vectors
# --------------------------------------------------------------------------


def test_the_sumdb_keys_parse_and_sign_the_published_note() -> None:
    peter = _peter()
    assert (peter.name, peter.sig_type, peter.key_id) == ("PeterNeumann", SIG_ED25519, 0xC74F20A3)
    assert peter.vkey == PETER_VKEY and _enoch().vkey == ENOCH_VKEY
    seed = base64.b64decode(PETER_SKEY.split("+", 4)[4])[1:]  # PRIVATE+KEY+<name>+<id>+base64(0x01 || seed)
    signer = NoteSigner("PeterNeumann", SIG_ED25519, seed)
    assert signer.verifier == peter
    assert sign_note(TEXT, [signer]) == (TEXT + "\n" + PETER_SIG).encode()
    assert "seed" not in repr(signer) and repr(seed) not in repr(signer)


def test_open_follows_sumdb_note() -> None:
    message = (TEXT + "\n" + PETER_SIG + ENOCH_SIG).encode()
    peter_sig = parse_note((TEXT + "\n" + PETER_SIG).encode()).signatures[0]
    enoch_sig = parse_note((TEXT + "\n" + ENOCH_SIG).encode()).signatures[0]
    assert (peter_sig.name, peter_sig.key_id) == ("PeterNeumann", 0xC74F20A3)
    assert (enoch_sig.name, enoch_sig.key_id) == ("EnochRoot", 0xAF0CFE78)

    opened = open_note(message, [_peter()])
    assert opened.text == TEXT and opened.verified == (peter_sig,) and opened.unknown == (enoch_sig,)
    assert opened.signed_by(_peter()) == peter_sig and opened.signed_by(_enoch()) is None

    both = open_note(message, [_peter(), _enoch()])
    assert both.verified == (peter_sig, enoch_sig) and both.unknown == ()

    with pytest.raises(UnverifiedNote) as caught:
        open_note(message, [])
    assert caught.value.note.signatures == (peter_sig, enoch_sig) and caught.value.code == "E_NOTE_UNVERIFIED"

    # the same key listed twice is one key (Go calls it ambiguous; equal keys cannot disagree)
    assert open_note(message, [_enoch(), _peter(), _enoch()]).verified == (peter_sig, enoch_sig)


def test_too_many_signatures_and_a_bad_known_signature_reject_the_note() -> None:
    with pytest.raises(MalformedNote):
        open_note((TEXT + "\n" + PETER_SIG * 101).encode(), [_peter()])
    with pytest.raises(MalformedNote):
        open_note((TEXT + "\n" + PETER_SIG * 101).encode(), [])
    assert open_note((TEXT + "\n" + PETER_SIG * MAX_SIGNATURES).encode(), [_peter()]).verified != ()
    tampered = TEXT + "\n" + PETER_SIG[:60] + "ABCD" + PETER_SIG[60:]
    with pytest.raises(InvalidNoteSignature) as caught:
        open_note(tampered.encode(), [_peter()])
    assert (caught.value.name, caught.value.key_id, caught.value.code) == ("PeterNeumann", 0xC74F20A3, "E_NOTE_BAD_SIGNATURE")
    # known keys' signatures are all checked: a good one does not excuse a bad one
    with pytest.raises(InvalidNoteSignature):
        open_note((TEXT + "\n" + PETER_SIG + ENOCH_SIG[:60] + "ABCD" + ENOCH_SIG[60:]).encode(), [_peter(), _enoch()])


def test_repeated_lines_are_checked_once_and_reported_once() -> None:
    enoch_abcd = ENOCH_SIG[:60] + "ABCD" + ENOCH_SIG[60:]
    message = TEXT + "\n" + PETER_SIG + PETER_SIG + ENOCH_SIG + ENOCH_SIG + enoch_abcd
    opened = open_note(message.encode(), [_peter()])
    assert [s.name for s in opened.verified] == ["PeterNeumann"]
    assert [s.name for s in opened.unknown] == ["EnochRoot", "EnochRoot"]
    assert opened.unknown[0] != opened.unknown[1]


@pytest.mark.parametrize(
    "message",
    [
        TEXT,
        TEXT + "\n",
        TEXT + "\n" + PETER_SIG[:-1],
        "\x01" + TEXT + "\n" + PETER_SIG,
        TEXT + "\n" + "— Bad Name x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=",
        TEXT + "\n" + PETER_SIG + "Unexpected line.\n",
        # beyond sumdb/note's list
        TEXT + "\n" + PETER_SIG + "\n",
        TEXT.replace("\n", "\r\n") + "\r\n" + PETER_SIG,
        TEXT + "\n" + PETER_SIG.replace("— ", "-- "),
        TEXT
        + "\n"
        + "— Peter+Neumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n",
        TEXT + "\n" + "— PeterNeumann\n",
        TEXT + "\n" + "— PeterNeumann x08gow==\n",  # a key id and no signature
        TEXT + "\n" + PETER_SIG.replace("AM=", "AN="),  # not canonical base64 (trailing bits set)
        TEXT + "\n" + PETER_SIG.replace("=\n", "\n"),  # unpadded
        TEXT
        + "\n"
        + "— \u2003PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n",
    ],
)
def test_malformed_notes_are_refused(message: str) -> None:
    with pytest.raises(MalformedNote):
        open_note(message.encode(), [_peter()])


def test_bytes_that_are_not_utf8_or_too_large_are_refused() -> None:
    with pytest.raises(MalformedNote):
        open_note(b"\xff" + (TEXT + "\n" + PETER_SIG).encode(), [_peter()])
    with pytest.raises(MalformedNote):
        open_note(("x" * notes.MAX_NOTE_BYTES + "\n\n" + PETER_SIG).encode(), [_peter()])
    with pytest.raises(MalformedNote):
        parse_note(TEXT)  # type: ignore[arg-type]


def test_vkey_manglings_are_refused() -> None:
    """sumdb/note's TestNewVerifier: every proper substring and every one-byte increment is refused."""
    refused = 0
    for i in range(len(PETER_VKEY) + 1):
        for j in range(i + 1, len(PETER_VKEY) + 1):
            if (i, j) != (0, len(PETER_VKEY)):
                with pytest.raises(MalformedVerifierKey):
                    NoteVerifier.from_vkey(PETER_VKEY[i:j])
                refused += 1
    for i in range(len(PETER_VKEY)):
        mangled = PETER_VKEY[:i] + chr(ord(PETER_VKEY[i]) + 1) + PETER_VKEY[i + 1 :]
        with pytest.raises(MalformedVerifierKey):
            NoteVerifier.from_vkey(mangled)
        refused += 1
    assert refused > 2000
    for bad in (
        "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",  # wrong length, adjusted id
        "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # unknown algorithm, adjusted id
        "PeterNeumann+C74F20A3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",  # upper-case hex
        # transparency-dev/formats TestCoSigV1NewVerifier's refusals
        "bananas.sigstore.dev+12344556",
        "rekor.sigstore.dev+12345678+THIS_IS_NOT_BASE64!",
        "rekor.sigstore.dev+12345678+AwEB",
    ):
        with pytest.raises(MalformedVerifierKey):
            NoteVerifier.from_vkey(bad)


def test_a_weak_public_key_is_refused() -> None:
    identity = (1).to_bytes(32, "little")  # the neutral point: under ZIP 215 anyone could sign for it
    with pytest.raises(MalformedVerifierKey, match="small order"):
        NoteVerifier("weak", SIG_ED25519, identity)
    vkey = f"weak+{notes.key_id('weak', SIG_ED25519, identity):08x}+" + base64.b64encode(b"\x01" + identity).decode()
    with pytest.raises(MalformedVerifierKey):
        NoteVerifier.from_vkey(vkey)


# --------------------------------------------------------------------------
# The C2SP and transparency-dev/formats vectors
# --------------------------------------------------------------------------


def test_the_c2sp_signed_note_example_verifies() -> None:
    verifier = NoteVerifier.from_vkey(C2SP_VKEY)
    assert verifier.key_id == 0x530D903A
    assert open_note(C2SP_NOTE.encode(), [verifier]).text == "This is an example message.\n"
    with pytest.raises(InvalidNoteSignature):
        open_note(C2SP_NOTE.replace("example message", "example massage").encode(), [verifier])


def test_a_real_sumdb_checkpoint_and_its_extra_signers_verify() -> None:
    log = NoteVerifier.from_vkey(SUMDB_VKEY)  # the key's base64 holds '+': only the first two split
    assert log.key_id == 0x033DE0AE
    checkpoint, opened = open_checkpoint(SUMDB_CHECKPOINT.encode(), [log])
    assert (checkpoint.origin, checkpoint.size, checkpoint.extensions) == ("go.sum database tree", 6476701, ())
    assert checkpoint.root_hash == base64.b64decode("mb8QLQIs0Z0yP5Cstq6guj87oXWeC9gEM8oVikmm9Wk=")
    assert checkpoint.body().decode() == opened.text
    extra = [NoteVerifier.from_vkey(v) for v in EXTRA_VKEYS]
    everything = (SUMDB_CHECKPOINT + "".join(EXTRA_SIGS)).encode()
    assert [s.name for s in open_note(everything, [log, *extra]).verified] == ["sum.golang.org", "monkeys", "bananas", "witness"]
    only_witness = open_note(everything, [extra[2]])
    assert [s.name for s in only_witness.verified] == ["witness"] and len(only_witness.unknown) == 3


def test_the_c2sp_cosignature_example_has_the_specs_layout() -> None:
    note = parse_note(C2SP_COSIGNED.encode())
    checkpoint = parse_checkpoint(note.text)
    assert (checkpoint.origin, checkpoint.size) == ("example.com/behind-the-sofa", 20852163)
    log_sig, cosig = note.signatures
    assert len(log_sig.signature) == 64 and len(cosig.signature) == 8 + 64
    assert cosignature_timestamp(cosig) == 1679315147
    assert cosignature_message(note.text.encode(), cosignature_timestamp(cosig)) == C2SP_SIGNED_MESSAGE.encode()
    with pytest.raises(MalformedNote):
        cosignature_timestamp(log_sig)
    with pytest.raises(UnverifiedNote):  # neither key is known here
        open_note(C2SP_COSIGNED.encode(), [_peter()])


def test_transparency_dev_cosignature_vectors() -> None:
    remora = NoteVerifier.from_vkey(REMORA_COSIG_VKEY)
    assert (remora.sig_type, remora.key_id, remora.vkey) == (SIG_COSIGNATURE_V1, 0xDA77ADE7, REMORA_COSIG_VKEY)
    plain = NoteVerifier.from_vkey(TEST_ED25519_VKEY)
    assert (plain.sig_type, plain.key_id) == (SIG_ED25519, 0x7997405C)
    # the same key as a cosigner has another key id (type byte 0x04)
    assert NoteVerifier(plain.name, SIG_COSIGNATURE_V1, plain.public_key).key_id != plain.key_id
    stamped = base64.b64decode(COSIG_WITH_TIME)
    assert cosignature_timestamp(Signature("w", int.from_bytes(stamped[:4], "big"), stamped[4:])) == 1727964367
    with pytest.raises(MalformedNote):
        cosignature_timestamp(Signature("w", 0, base64.b64decode(PLAIN_SIG)[4:]))


# --------------------------------------------------------------------------
# Checkpoints and cosignatures made here
# --------------------------------------------------------------------------


def test_a_cosignature_has_the_byte_layout_of_the_spec() -> None:
    body = _checkpoint().body()
    signature = WITNESS.sign(body, timestamp=TIME)
    raw = base64.b64decode(signature.line().split(" ")[2])
    assert signature.line().startswith("— witness.example/w1 ") and signature.line().endswith("\n")
    assert len(raw) == 4 + 8 + 64
    public = WITNESS.public_key
    assert raw[:4] == hashlib.sha256(b"witness.example/w1\n\x04" + public).digest()[:4]
    assert raw[4:12] == TIME.to_bytes(8, "big") == bytes.fromhex("000000006553f100")
    message = b"cosignature/v1\ntime 1700000000\n" + body
    assert message == cosignature_message(body, TIME)
    Ed25519PublicKey.from_public_bytes(public).verify(raw[12:], message)  # raises if not
    assert body.startswith(b"example.com/bernstein/p0\n5\n") and body.endswith(b"\nepoch 3\n")


def test_a_signed_and_cosigned_checkpoint_round_trips() -> None:
    checkpoint = _checkpoint()
    signed = sign_note(checkpoint.body(), [LOG])
    cosigned = add_signatures(signed, [WITNESS.sign(checkpoint.body(), timestamp=TIME)])
    assert cosigned.startswith(signed)
    parsed, opened = open_checkpoint(cosigned, [LOG.verifier, WITNESS.verifier])
    assert parsed == checkpoint
    assert opened.signed_by(LOG.verifier) is not None
    cosig = opened.signed_by(WITNESS.verifier)
    assert cosig is not None and cosignature_timestamp(cosig) == TIME
    assert sign_note(checkpoint.body(), [LOG, WITNESS], timestamp=TIME) == cosigned
    # a witness's vkey round-trips with its type byte
    assert NoteVerifier.from_vkey(WITNESS.verifier.vkey) == WITNESS.verifier
    assert base64.b64decode(WITNESS.verifier.vkey.split("+", 2)[2])[0] == SIG_COSIGNATURE_V1
    # adding a newer cosignature replaces the older one of the same key
    later = add_signatures(cosigned, [WITNESS.sign(checkpoint.body(), timestamp=TIME + 60)])
    newest = open_note(later, [WITNESS.verifier]).signed_by(WITNESS.verifier)
    assert newest is not None and cosignature_timestamp(newest) == TIME + 60 and len(parse_note(later).signatures) == 2


def test_cosignatures_are_bound_to_type_time_and_every_line() -> None:
    checkpoint = _checkpoint()
    cosigned = sign_note(checkpoint.body(), [LOG, WITNESS], timestamp=TIME)
    # the witness key as a plain Ed25519 key has another key id: its cosignature is unknown to it
    as_plain = NoteVerifier(WITNESS.name, SIG_ED25519, WITNESS.public_key)
    with pytest.raises(UnverifiedNote):
        open_note(cosigned, [as_plain])
    line = parse_note(cosigned).signatures[1]
    moved = Signature(line.name, line.key_id, (TIME + 1).to_bytes(8, "big") + line.signature[8:])
    with pytest.raises(InvalidNoteSignature):
        open_note(Note(checkpoint.body().decode(), (moved,)).encode(), [WITNESS.verifier])
    extended = cosigned.replace(b"epoch 3\n", b"epoch 4\n")
    with pytest.raises(InvalidNoteSignature):
        open_note(extended, [WITNESS.verifier])
    # a cosignature over a text that is not a checkpoint is never valid, and is never made
    with pytest.raises(MalformedCheckpoint):
        WITNESS.sign("hello\n", timestamp=TIME)
    forged = Signature(WITNESS.name, WITNESS.key_id, line.signature)
    with pytest.raises(InvalidNoteSignature):
        open_note(Note("hello\n", (forged,)).encode(), [WITNESS.verifier])
    with pytest.raises(MalformedNote):
        WITNESS.sign(checkpoint.body())  # no timestamp
    with pytest.raises(MalformedNote):
        WITNESS.sign(checkpoint.body(), timestamp=2**63)
    with pytest.raises(MalformedNote):
        LOG.sign(checkpoint.body(), timestamp=TIME)  # a plain signature has none


def test_two_different_keys_with_one_name_and_key_id_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(notes, "key_id", lambda name, sig_type, public_key: 7)
    other = NoteSigner(LOG.name, SIG_ED25519, WITNESS_SEED)
    with pytest.raises(AmbiguousVerifiers):
        open_note(sign_note("text\n", [LOG]), [LOG.verifier, other.verifier])


@pytest.mark.parametrize(
    "body",
    [
        b"origin\n5\n" + base64.b64encode(bytes(32)) + b"\n",
        b"origin\n0\n" + base64.b64encode(EMPTY_ROOT) + b"\n",
        b"origin with spaces + plus\n18446744073709551615\n" + base64.b64encode(bytes(32)) + b"\nextension one\next 2\n",
    ],
)
def test_checkpoints_parse_and_re_encode_byte_for_byte(body: bytes) -> None:
    assert parse_checkpoint(body).body() == body
    assert parse_checkpoint(body.decode()) == parse_checkpoint(body)


ROOT64 = base64.b64encode(bytes(32)).decode()


@pytest.mark.parametrize(
    "body",
    [
        f"origin\n5\n{ROOT64}",  # no final newline
        "origin\n5\n",
        f"\n5\n{ROOT64}\n",
        f"origin\n05\n{ROOT64}\n",
        f"origin\n+5\n{ROOT64}\n",
        f"origin\n 5\n{ROOT64}\n",
        f"origin\n1_0\n{ROOT64}\n",
        f"origin\n\u0665\n{ROOT64}\n",  # ARABIC-INDIC DIGIT FIVE: int() would take it
        f"origin\n-1\n{ROOT64}\n",
        f"origin\n18446744073709551616\n{ROOT64}\n",
        f"origin\n{'9' * 40}\n{ROOT64}\n",
        "origin\n5\nnot base64!\n",
        f"origin\n5\n{base64.b64encode(bytes(31)).decode()}\n",
        f"origin\n5\n{ROOT64[:-2]}B=\n",  # trailing bits set: not canonical
        f"origin\n5\n{ROOT64}\n\n",  # an empty extension line
        f"origin\n5\n{ROOT64}\next\x07\n",
        f"origin\n0\n{ROOT64}\n",  # size 0 with a root that is not the empty tree's
        f"origin\r\n5\n{ROOT64}\n",
    ],
)
def test_malformed_checkpoints_are_refused(body: str) -> None:
    with pytest.raises(MalformedCheckpoint) as caught:
        parse_checkpoint(body)
    assert isinstance(caught.value, MalformedInput) and caught.value.code == "E_MALFORMED_CHECKPOINT"


def test_checkpoint_values_are_checked() -> None:
    for make in (
        lambda: Checkpoint("", 1, bytes(32)),
        lambda: Checkpoint("a\nb", 1, bytes(32)),
        lambda: Checkpoint("o", -1, bytes(32)),
        lambda: Checkpoint("o", 2**64, bytes(32)),
        lambda: Checkpoint("o", 1, bytes(31)),
        lambda: Checkpoint("o", 0, bytes(32)),
        lambda: Checkpoint("o", 1, bytes(32), ("",)),
        lambda: Checkpoint("o", 1, bytes(32), ("a\nb",)),
        lambda: Checkpoint(b"o", 1, bytes(32)),  # type: ignore[arg-type]
    ):
        with pytest.raises(MalformedCheckpoint):
            make()


def test_signers_and_notes_refuse_what_no_note_may_hold() -> None:
    with pytest.raises(MalformedNote):
        sign_note("abc", [LOG])  # sumdb/note: a text ends in a newline
    with pytest.raises(MalformedNote):
        sign_note("a\x00\n", [LOG])
    with pytest.raises(MalformedNote):
        Note("text\n", ()).encode()
    with pytest.raises(MalformedNote):
        Note("text\n", (Signature("a b", 1, b"x"),)).encode()
    with pytest.raises(MalformedVerifierKey):
        NoteSigner("name", SIG_ED25519, b"short")
    with pytest.raises(MalformedVerifierKey):
        NoteSigner("bad name", SIG_ED25519, LOG_SEED)
    with pytest.raises(MalformedVerifierKey):
        NoteSigner("name", 0x02, LOG_SEED)  # ECDSA: not supported


# --------------------------------------------------------------------------
# Properties
# --------------------------------------------------------------------------

COSIGNED = sign_note(_checkpoint().body(), [LOG, WITNESS], timestamp=TIME)
VERIFIERS = [LOG.verifier, WITNESS.verifier, _peter()]


@settings(max_examples=400)
@given(EDITS)
def test_a_mutated_signed_note_is_refused_or_still_says_the_same(edits: list[tuple[int, int, int]]) -> None:
    data = mutate(COSIGNED, edits)
    try:
        checkpoint, opened = open_checkpoint(data, VERIFIERS)
    except (MalformedNote, NoteRejected):
        return
    assert checkpoint == _checkpoint()
    assert opened.text.encode() == _checkpoint().body()


@settings(max_examples=300)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_raise_only_the_typed_errors(raw: bytes) -> None:
    try:
        open_note(raw, VERIFIERS)
    except (MalformedNote, NoteRejected):
        pass
    try:
        parse_checkpoint(raw)
    except MalformedCheckpoint:
        pass


NOTE_TEXT = st.text(st.characters(blacklist_categories=("Cs", "Cc")) | st.just("\n"), max_size=60).map(lambda t: t + "\n")


@settings(max_examples=200)
@given(NOTE_TEXT)
def test_any_text_signs_and_opens_to_itself(text: str) -> None:
    data = sign_note(text, [LOG])
    opened = open_note(data, [LOG.verifier])
    assert opened.text == text
    assert parse_note(data).text == text
