//! The partition's Merkle log as its compact frontier, as `schemas/merkle.py` `Frontier` has it.
//!
//! RFC 6962 / RFC 9162 hashing: a leaf's hash is `SHA-256(0x00 || leaf)`, an interior node's
//! `SHA-256(0x01 || left || right)`, the empty tree's root `SHA-256("")`. The frontier of a tree
//! of `size` leaves is the roots of the perfect subtrees that make up `[0, size)`, largest first,
//! one for each set bit of `size`; the root folds them from the right. Its byte form:
//!
//! ```text
//! 0x01 (version) || size (8 bytes, big endian) || popcount(size) x 32-byte subtree roots
//! ```
//!
//! `Frontier::decode` refuses anything else. No I/O, no clock, no randomness.

use sha2::{Digest, Sha256};

/// Bytes in every hash here (SHA-256).
pub const HASH_SIZE: usize = 32;
/// The first byte of `Frontier::encode`'s output.
pub const FRONTIER_VERSION: u8 = 1;

pub type Hash = [u8; HASH_SIZE];

/// `merkle.leaf_hash`: `SHA-256(0x00 || leaf)`.
pub fn leaf_hash(leaf: &[u8]) -> Hash {
    let mut h = Sha256::new();
    h.update([0u8]);
    h.update(leaf);
    h.finalize().into()
}

/// `merkle.node_hash`: `SHA-256(0x01 || left || right)`.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    let mut h = Sha256::new();
    h.update([1u8]);
    h.update(left);
    h.update(right);
    h.finalize().into()
}

/// `merkle.EMPTY_ROOT`: the root of the empty tree, `SHA-256("")`.
pub fn empty_root() -> Hash {
    Sha256::digest(b"").into()
}

/// The roots of the perfect subtrees that make up a tree of `size` leaves, largest first
/// (`nodes.len() == size.count_ones()`, an invariant every constructor keeps).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frontier {
    size: u64,
    nodes: Vec<Hash>,
}

impl Frontier {
    /// The empty tree.
    pub fn new() -> Self {
        Frontier::default()
    }

    /// Leaves in the tree.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The subtree roots, largest first.
    pub fn nodes(&self) -> &[Hash] {
        &self.nodes
    }

    /// `Frontier.append`: one more leaf (its hash), merging equal-sized subtrees. None when the
    /// tree already has `2**64 - 1` leaves (the reference raises there).
    pub fn append(&mut self, leaf_hash_value: Hash) -> Option<()> {
        if self.size == u64::MAX {
            return None;
        }
        let mut value = leaf_hash_value;
        let mut size = self.size;
        while size & 1 == 1 {
            // each trailing set bit of the old size is a subtree the new leaf completes
            let left = self.nodes.pop().expect("one node per set bit");
            value = node_hash(&left, &value);
            size >>= 1;
        }
        self.nodes.push(value);
        self.size += 1;
        Some(())
    }

    /// `Frontier.root`: the subtree roots folded from the right; the empty root for size 0.
    pub fn root(&self) -> Hash {
        let Some((last, rest)) = self.nodes.split_last() else {
            return empty_root();
        };
        rest.iter()
            .rev()
            .fold(*last, |value, node| node_hash(node, &value))
    }

    /// `Frontier.encode`: `0x01 || size (u64 big endian) || nodes`.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(9 + HASH_SIZE * self.nodes.len());
        out.push(FRONTIER_VERSION);
        out.extend_from_slice(&self.size.to_be_bytes());
        for node in &self.nodes {
            out.extend_from_slice(node);
        }
        out
    }

    /// `Frontier.decode`: `encode`'s bytes back, or what is wrong with them (`MalformedFrontier`'s
    /// messages).
    pub fn decode(data: &[u8]) -> Result<Frontier, String> {
        if data.len() < 9 {
            return Err(format!(
                "a frontier has at least 9 bytes, got {}",
                data.len()
            ));
        }
        if data[0] != FRONTIER_VERSION {
            return Err(format!(
                "unknown frontier version {} (this code reads {FRONTIER_VERSION})",
                data[0]
            ));
        }
        let size = u64::from_be_bytes(data[1..9].try_into().expect("8 bytes"));
        let expected = 9 + HASH_SIZE * size.count_ones() as usize;
        if data.len() != expected {
            return Err(format!(
                "a frontier of size {size} has {expected} bytes, got {}",
                data.len()
            ));
        }
        let nodes = data[9..]
            .chunks_exact(HASH_SIZE)
            .map(|c| c.try_into().expect("32 bytes"))
            .collect();
        Ok(Frontier { size, nodes })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(bytes: &[u8]) -> String {
        crate::hashing::hex_string(bytes)
    }

    /// MTH of `leaves` by the recursive definition (RFC 9162 2.1.1).
    fn mth(leaves: &[Hash]) -> Hash {
        match leaves.len() {
            0 => empty_root(),
            1 => leaves[0],
            n => {
                let k = 1usize << (usize::BITS - 1 - (n - 1).leading_zeros());
                node_hash(&mth(&leaves[..k]), &mth(&leaves[k..]))
            }
        }
    }

    #[test]
    fn hashes_are_domain_separated() {
        assert_eq!(
            hex(&empty_root()),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        // RFC 6962 test vectors (certificate-transparency-go merkle tests): the empty leaf
        assert_eq!(
            hex(&leaf_hash(b"")),
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
        );
        let a = leaf_hash(b"a");
        let b = leaf_hash(b"b");
        assert_ne!(node_hash(&a, &b), node_hash(&b, &a));
    }

    #[test]
    fn the_root_is_the_merkle_tree_hash_at_every_size() {
        let leaves: Vec<Hash> = (0u32..70).map(|i| leaf_hash(&i.to_be_bytes())).collect();
        let mut frontier = Frontier::new();
        assert_eq!(frontier.root(), empty_root());
        for (i, leaf) in leaves.iter().enumerate() {
            frontier.append(*leaf).unwrap();
            assert_eq!(frontier.size(), i as u64 + 1);
            assert_eq!(frontier.nodes().len(), (i + 1).count_ones() as usize);
            assert_eq!(frontier.root(), mth(&leaves[..=i]), "size {}", i + 1);
        }
    }

    #[test]
    fn rfc6962_reference_roots() {
        // the eight leaves of the RFC 6962 / CT reference tests, and the roots at sizes 1..8
        let inputs: [&[u8]; 8] = [
            b"",
            b"\x00",
            b"\x10",
            b"\x20\x21",
            b"\x30\x31",
            b"\x40\x41\x42\x43",
            b"\x50\x51\x52\x53\x54\x55\x56\x57",
            b"\x60\x61\x62\x63\x64\x65\x66\x67\x68\x69\x6a\x6b\x6c\x6d\x6e\x6f",
        ];
        let roots = [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
            "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
            "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
            "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
            "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
        ];
        let mut frontier = Frontier::new();
        for (input, root) in inputs.iter().zip(roots) {
            frontier.append(leaf_hash(input)).unwrap();
            assert_eq!(hex(&frontier.root()), root);
        }
    }

    #[test]
    fn encode_and_decode_round_trip_strictly() {
        let mut frontier = Frontier::new();
        assert_eq!(frontier.encode(), [1, 0, 0, 0, 0, 0, 0, 0, 0]);
        for i in 0u8..11 {
            frontier.append(leaf_hash(&[i])).unwrap();
            let bytes = frontier.encode();
            assert_eq!(bytes.len(), 9 + 32 * frontier.nodes().len());
            assert_eq!(&bytes[1..9], &frontier.size().to_be_bytes());
            assert_eq!(Frontier::decode(&bytes), Ok(frontier.clone()));
            let mut longer = bytes.clone();
            longer.push(0);
            assert!(Frontier::decode(&longer).is_err());
            assert!(Frontier::decode(&bytes[..bytes.len() - 1]).is_err());
            let mut version = bytes.clone();
            version[0] = 2;
            assert!(Frontier::decode(&version).is_err());
        }
        assert_eq!(
            Frontier::decode(&[1, 0, 0]),
            Err("a frontier has at least 9 bytes, got 3".to_owned())
        );
        assert_eq!(
            Frontier::decode(&[1, 0, 0, 0, 0, 0, 0, 0, 1]),
            Err("a frontier of size 1 has 41 bytes, got 9".to_owned())
        );
    }

    #[test]
    fn a_full_tree_takes_no_more_leaves() {
        let mut data = vec![1u8];
        data.extend_from_slice(&u64::MAX.to_be_bytes());
        data.extend(std::iter::repeat_n(7u8, 64 * 32));
        let mut frontier = Frontier::decode(&data).unwrap();
        assert_eq!(frontier.append(leaf_hash(b"x")), None);
        assert_eq!(frontier.encode(), data);
    }
}
