//! The one Ed25519 verification rule of the system: ZIP 215 (cofactored), one signature at a
//! time or many at once, with the same answer either way.
//!
//! `schemas.ed25519.verify_signature` is the reference. The rule (ZIP 215, as Zcash and
//! `ed25519-zebra` apply it):
//!
//! - `A` (the public key) and `R` decode from any 32 bytes whose `y` (mod p) is on the curve:
//!   non-canonical encodings (`y >= p`, a sign bit on `x = 0`) are accepted, and the hash
//!   uses the bytes as given;
//! - `S` must be canonical (`S < L`);
//! - `[8]([S]B - R - [k]A)` is the identity, `k = SHA-512(R || A || M) mod L`.
//!
//! RFC 8032's cofactorless check (`[S]B - [k]A` encodes to `R`, what OpenSSL does) refuses some
//! signatures with small-order components that this accepts; every signature the cofactorless
//! check accepts, this accepts too. What the cofactored rule buys: a batch equation (random
//! linear combination, multiplied by the cofactor) decides exactly as the single checks do, so
//! many signatures verify for about half the work without two cores or two checks disagreeing.
//!
//! The batch's coefficients are derived from its contents (a SHA-512 transcript of every key,
//! signature and `k`), not drawn at random: the scheduler's verdicts stay a pure
//! function of its inputs, and a forger would need a batch whose own hash cancels its error
//! (2^-128 a try).

use curve25519_dalek::constants::ED25519_BASEPOINT_POINT;
use curve25519_dalek::edwards::{CompressedEdwardsY, EdwardsPoint};
use curve25519_dalek::scalar::Scalar;
use curve25519_dalek::traits::{IsIdentity as _, VartimeMultiscalarMul as _};
use sha2::{Digest as _, Sha512};

/// A public key decoded once, kept with the bytes it was given as (they enter every `k`).
#[derive(Clone)]
pub struct PublicKey {
    bytes: [u8; 32],
    /// `-A`: what the single check multiplies by `k`.
    minus_a: EdwardsPoint,
}

impl PublicKey {
    /// None when the bytes are not 32 long or name no curve point.
    pub fn from_bytes(raw: &[u8]) -> Option<Self> {
        let bytes: [u8; 32] = raw.try_into().ok()?;
        let a = CompressedEdwardsY(bytes).decompress()?;
        Some(Self { bytes, minus_a: -a })
    }

    /// The key as given (possibly a non-canonical encoding).
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.bytes
    }

    /// True when `signature` is a ZIP 215 signature of `message` under this key.
    pub fn verifies(&self, signature: &[u8], message: &[u8]) -> bool {
        let Some(parts) = Parts::of(self, signature, message) else {
            return false;
        };
        let s_b_minus_k_a =
            EdwardsPoint::vartime_double_scalar_mul_basepoint(&parts.k, &self.minus_a, &parts.s);
        (s_b_minus_k_a - parts.r).mul_by_cofactor().is_identity()
    }
}

/// A signature taken apart for its equation: None when `R` names no point or `S` is not canonical.
struct Parts {
    r: EdwardsPoint,
    s: Scalar,
    k: Scalar,
}

impl Parts {
    fn of(key: &PublicKey, signature: &[u8], message: &[u8]) -> Option<Self> {
        let signature: &[u8; 64] = signature.try_into().ok()?;
        let (r_bytes, s_bytes) = signature.split_at(32);
        let r = CompressedEdwardsY(r_bytes.try_into().ok()?).decompress()?;
        let s: Option<Scalar> = Scalar::from_canonical_bytes(s_bytes.try_into().ok()?).into();
        let mut h = Sha512::new();
        h.update(r_bytes);
        h.update(key.bytes);
        h.update(message);
        let k = Scalar::from_bytes_mod_order_wide(&h.finalize().into());
        Some(Self { r, s: s?, k })
    }
}

/// One signature of a batch: under `key`, `signature` over `message`.
#[derive(Clone, Copy)]
pub struct Item<'a> {
    pub key: &'a PublicKey,
    pub signature: &'a [u8],
    pub message: &'a [u8],
}

const BATCH_DOMAIN: &[u8] = b"bernstein/ed25519-batch/v1";
/// Signatures per batch equation: large enough that the per-signature cost is near its floor,
/// small enough that one bad signature costs little to find.
pub const BATCH_SIZE: usize = 128;

/// The ZIP 215 verdict of every item, in order: what `PublicKey::verifies` answers for each.
///
/// Items are checked `BATCH_SIZE` at a time with one cofactored equation; a batch that does not
/// hold is checked one signature at a time, so the verdicts name exactly the bad ones.
pub fn verify_many(items: &[Item<'_>]) -> Vec<bool> {
    let mut verdicts = Vec::with_capacity(items.len());
    for batch in items.chunks(BATCH_SIZE) {
        if batch.len() > 1 && batch_holds(batch) {
            verdicts.extend(std::iter::repeat_n(true, batch.len()));
        } else {
            verdicts.extend(
                batch
                    .iter()
                    .map(|item| item.key.verifies(item.signature, item.message)),
            );
        }
    }
    verdicts
}

/// `verify_many` over items of which some cannot be checked at all (None: a key that names no
/// point, a statement with no signing input): those are false, the rest as `verify_many` says.
pub fn verify_each(items: &[Option<Item<'_>>]) -> Vec<bool> {
    let checked: Vec<Item<'_>> = items.iter().flatten().copied().collect();
    let mut verdicts = verify_many(&checked).into_iter();
    items
        .iter()
        .map(|item| item.is_some() && verdicts.next().unwrap_or(false))
        .collect()
}

/// `[8]( -[sum z_i S_i]B + sum z_i R_i + sum_keys [sum z_i k_i] A )` is the identity, the `z_i`
/// 128-bit coefficients from the batch's transcript (every key, signature and `k`: `k` hashes R, A
/// and the message, so it binds the message without hashing it twice). False when any item does
/// not parse.
pub fn batch_holds(batch: &[Item<'_>]) -> bool {
    let mut transcript = Sha512::new();
    transcript.update(BATCH_DOMAIN);
    transcript.update((batch.len() as u64).to_le_bytes());
    let mut parts = Vec::with_capacity(batch.len());
    for item in batch {
        let Some(p) = Parts::of(item.key, item.signature, item.message) else {
            return false;
        };
        transcript.update(item.key.bytes);
        transcript.update(item.signature);
        transcript.update(p.k.as_bytes());
        parts.push(p);
    }
    let seed = transcript.finalize();
    // one term per distinct key (a run's entries share their producer's key)
    let mut keys: Vec<(&PublicKey, Scalar)> = Vec::new();
    let mut scalars: Vec<Scalar> = Vec::with_capacity(batch.len() + 2);
    let mut points: Vec<EdwardsPoint> = Vec::with_capacity(batch.len() + 2);
    let mut s_sum = Scalar::ZERO;
    let mut block = [0u8; 64];
    for (i, (item, p)) in batch.iter().zip(&parts).enumerate() {
        if i % 4 == 0 {
            // four 128-bit coefficients from each hash of the seed and a counter
            let mut h = Sha512::new();
            h.update(seed);
            h.update(((i / 4) as u64).to_le_bytes());
            block.copy_from_slice(&h.finalize());
        }
        let mut wide = [0u8; 32];
        wide[..16].copy_from_slice(&block[(i % 4) * 16..(i % 4 + 1) * 16]);
        let z = Scalar::from_bytes_mod_order(wide);
        s_sum += z * p.s;
        scalars.push(z);
        points.push(p.r);
        let zk = z * p.k;
        match keys.iter_mut().find(|(k, _)| k.bytes == item.key.bytes) {
            Some((_, sum)) => *sum += zk,
            None => keys.push((item.key, zk)),
        }
    }
    for (key, sum) in keys {
        // [sum z_i k_i] A, as [-sum z_i k_i] (-A)
        scalars.push(-sum);
        points.push(key.minus_a);
    }
    scalars.push(-s_sum);
    points.push(ED25519_BASEPOINT_POINT);
    EdwardsPoint::vartime_multiscalar_mul(scalars, points)
        .mul_by_cofactor()
        .is_identity()
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer as _, SigningKey};

    fn signed(seed: u8, message: &[u8]) -> (PublicKey, Vec<u8>) {
        let key = SigningKey::from_bytes(&[seed; 32]);
        let public = PublicKey::from_bytes(key.verifying_key().as_bytes()).unwrap();
        (public, key.sign(message).to_bytes().to_vec())
    }

    #[test]
    fn honest_signatures_verify_alone_and_in_batches() {
        let messages: Vec<Vec<u8>> = (0..300u32).map(|i| format!("m{i}").into_bytes()).collect();
        let signed: Vec<_> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| signed((i % 3) as u8 + 1, m))
            .collect();
        let items: Vec<Item<'_>> = signed
            .iter()
            .zip(&messages)
            .map(|((key, sig), message)| Item {
                key,
                signature: sig,
                message,
            })
            .collect();
        assert!(items.iter().all(|i| i.key.verifies(i.signature, i.message)));
        assert_eq!(verify_many(&items), vec![true; 300]);
    }

    #[test]
    fn a_batch_names_exactly_the_bad_signatures() {
        let messages: Vec<Vec<u8>> = (0..200u32).map(|i| format!("m{i}").into_bytes()).collect();
        let mut signed: Vec<_> = messages.iter().map(|m| signed(7, m)).collect();
        signed[5].1[0] ^= 1; // R edited
        signed[150].1[40] ^= 1; // S edited
        let wrong = b"not what was signed".to_vec();
        let items: Vec<Item<'_>> = signed
            .iter()
            .zip(&messages)
            .enumerate()
            .map(|(i, ((key, sig), message))| Item {
                key,
                signature: sig,
                message: if i == 77 { &wrong } else { message },
            })
            .collect();
        let verdicts = verify_many(&items);
        let bad: Vec<usize> = (0..200).filter(|&i| !verdicts[i]).collect();
        assert_eq!(bad, vec![5, 77, 150]);
    }

    #[test]
    fn s_must_be_canonical() {
        let (key, mut sig) = signed(9, b"m");
        // S + L: the same scalar mod L, not canonical
        let l: [u8; 32] = [
            0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9,
            0xde, 0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
        ];
        let mut carry = 0u16;
        for i in 0..32 {
            let sum = u16::from(sig[32 + i]) + u16::from(l[i]) + carry;
            sig[32 + i] = sum as u8;
            carry = sum >> 8;
        }
        assert_eq!(carry, 0);
        assert!(!key.verifies(&sig, b"m"));
    }
}
