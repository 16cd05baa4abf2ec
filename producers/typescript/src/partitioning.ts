/**
 * Kafka's default partitioner for keyed records, exactly the Java client's `Utils.murmur2`
 * (seed 0x9747b28c) over the key bytes: `partition = (murmur2(key) & 0x7fffffff) % partitions`.
 * The scheduler refuses a submission on any other partition (WRONG_PARTITION). The emitter
 * produces with kafkajs' `Partitioners.DefaultPartitioner`, which computes the same (a unit test
 * checks the two agree); this pure function is what the conformance runner checks against
 * `schemas/vectors/partitions.json`.
 */

const SEED = 0x9747b28c;
const M = 0x5bd1e995;

/** Java's `Utils.murmur2(byte[])`: a signed 32-bit integer. */
export function murmur2(key: Uint8Array): number {
  const length = key.length;
  let h = (SEED ^ length) | 0;
  const length4 = length >>> 2;
  for (let i = 0; i < length4; i++) {
    const i4 = i * 4;
    let k = (key[i4]! & 0xff) | ((key[i4 + 1]! & 0xff) << 8) | ((key[i4 + 2]! & 0xff) << 16) | ((key[i4 + 3]! & 0xff) << 24);
    k = Math.imul(k, M);
    k ^= k >>> 24;
    k = Math.imul(k, M);
    h = Math.imul(h, M);
    h ^= k;
  }
  const tail = length & ~3;
  switch (length % 4) {
    case 3:
      h ^= (key[tail + 2]! & 0xff) << 16;
    // falls through
    case 2:
      h ^= (key[tail + 1]! & 0xff) << 8;
    // falls through
    case 1:
      h ^= key[tail]! & 0xff;
      h = Math.imul(h, M);
  }
  h ^= h >>> 13;
  h = Math.imul(h, M);
  h ^= h >>> 15;
  return h | 0;
}

/** The partition of a record keyed `key` on a topic of `partitions` partitions. */
export function partitionFor(key: Uint8Array, partitions: number): number {
  if (!Number.isInteger(partitions) || partitions < 1) throw new RangeError(`partitions must be a positive integer, got ${partitions}`);
  return (murmur2(key) & 0x7fffffff) % partitions;
}
