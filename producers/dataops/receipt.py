"""Re-export of the data/ops receipt and refusal formats from ``bernstein.schemas.documents.dataops``.

The model, canonical bytes, what is signed and the parsing live in the
document package (one home shared with the scheduler and the verifier); this
module keeps the producers' import path working.
"""

from __future__ import annotations

from bernstein.schemas.documents.dataops import (
    DATAOPS_KINDS,
    ED25519_SIGNATURE_BYTES,
    RECEIPT_FORMAT,
    REFUSAL_FORMAT,
    ROLE_INPUT,
    ROLE_OUTPUT,
    DataOpsPlan,
    DataOpsReceipt,
    MalformedReceipt,
    SignedArtifact,
    Signer,
    artifact_signing_input,
    artifact_statement,
    decode_signature,
    encode_signature,
    is_canonical,
    load_document,
    parse_refusal_document,
    receipt_signing_input,
)

__all__ = [
    "DATAOPS_KINDS",
    "ED25519_SIGNATURE_BYTES",
    "RECEIPT_FORMAT",
    "REFUSAL_FORMAT",
    "ROLE_INPUT",
    "ROLE_OUTPUT",
    "DataOpsPlan",
    "DataOpsReceipt",
    "MalformedReceipt",
    "SignedArtifact",
    "Signer",
    "artifact_signing_input",
    "artifact_statement",
    "decode_signature",
    "encode_signature",
    "is_canonical",
    "load_document",
    "parse_refusal_document",
    "receipt_signing_input",
]
