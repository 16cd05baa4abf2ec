"""What the write-once, self-checking CAS costs against plain S3 puts and gets.

    python -m bench.cas [--blobs 400] [--size 16384] [--rounds 3]

Needs `infra/up` (its MinIO and .infra/env). Two ways to store and read the same number of fresh
blobs of ``--size`` random bytes, on the same MinIO, interleaved round by round:

- plain: ``put_object`` and ``get_object`` into a bucket without versioning or Object Lock, as the
  SDKs did before (the upload skipped after a HEAD that finds an object, never the case for fresh
  blobs: one HEAD and one PUT per blob, then one GET);
- cas: ``S3BlobStore.put`` and ``get`` on the deployment's bucket (versioned, Object Lock, the
  upload carrying ``x-amz-checksum-sha256`` that MinIO checks, the skip decided by a HEAD in checksum
  mode; the read re-hashed).

Prints blobs per second of each, per round, and the last line ``cas_vs_plain_put=<cas / plain>
cas_vs_plain_get=<cas / plain>`` (medians; the target is at least 0.8 for both).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import time

from bernstein.schemas.canonical import sha256_digest
from bernstein.substrate.cas import S3BlobStore, blob_key
from bernstein.substrate.config import Settings


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--blobs", type=int, default=400)
    parser.add_argument("--size", type=int, default=16384)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    settings = Settings.load().s3
    if settings is None:
        raise SystemExit("bench.cas: no S3 endpoint: run `infra/up` first (it writes .infra/env)")
    cas = S3BlobStore(settings)
    client = cas._client
    plain_bucket = f"{settings.bucket}-bench-plain"
    if not client.bucket_exists(plain_bucket):
        client.make_bucket(plain_bucket)
    rates: dict[str, list[float]] = {"plain_put": [], "cas_put": [], "plain_get": [], "cas_get": []}
    for round_no in range(args.rounds):
        blobs = [os.urandom(args.size) for _ in range(args.blobs)]
        digests = [sha256_digest(b) for b in blobs]

        began = time.perf_counter()
        for data, digest in zip(blobs, digests, strict=True):
            key = blob_key(digest)
            try:
                client.stat_object(plain_bucket, key)
            except Exception:  # noqa: BLE001 - absent, as every fresh blob is
                client.put_object(plain_bucket, key, io.BytesIO(data), len(data), content_type="application/octet-stream")
        rates["plain_put"].append(args.blobs / (time.perf_counter() - began))

        began = time.perf_counter()
        for data in blobs:
            cas.put(data)
        rates["cas_put"].append(args.blobs / (time.perf_counter() - began))

        began = time.perf_counter()
        for digest in digests:
            response = client.get_object(plain_bucket, blob_key(digest))
            try:
                response.read()
            finally:
                response.close()
                response.release_conn()
        rates["plain_get"].append(args.blobs / (time.perf_counter() - began))

        began = time.perf_counter()
        for data, digest in zip(blobs, digests, strict=True):
            assert cas.get(digest) == data
        rates["cas_get"].append(args.blobs / (time.perf_counter() - began))
        print(
            f"round {round_no + 1}: put plain {rates['plain_put'][-1]:.0f}/s cas {rates['cas_put'][-1]:.0f}/s; "
            f"get plain {rates['plain_get'][-1]:.0f}/s cas {rates['cas_get'][-1]:.0f}/s ({args.blobs} blobs of {args.size} B)"
        )
    median = {name: statistics.median(values) for name, values in rates.items()}
    print(
        f"cas_vs_plain_put={median['cas_put'] / median['plain_put']:.2f} "
        f"cas_vs_plain_get={median['cas_get'] / median['plain_get']:.2f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
