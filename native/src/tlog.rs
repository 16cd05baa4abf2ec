//! The partition's Merkle log: what each journal record adds to it (`schemas.canonical`
//! `tlog_entry_leaf`, `tlog_seal_leaf`), the log's origin (`tlog_origin`) and the signed
//! checkpoint note a PartitionCheckpoint.v2 carries (`schemas.notes.log_checkpoint_note`),
//! byte for byte. The tree itself is `crate::merkle`.

use ed25519_dalek::{Signer as _, SigningKey};
use sha2::{Digest, Sha256};

use crate::hashing::pae;
use crate::merkle::{leaf_hash, Hash};

pub const DOMAIN_TLOG_LEAF: &str = "bernstein/tlog-leaf/v1";
/// `schemas.notes.SIG_ED25519`
const SIG_ED25519: u8 = 0x01;
/// `model.MAX_LOG_EPOCH`
pub const MAX_LOG_EPOCH: i64 = (1 << 31) - 1;
/// `model.DEFAULT_LOG_NAME`
pub const DEFAULT_LOG_NAME: &str = "bernstein";
/// `model.LOG_NAME_RULE`
pub const LOG_NAME_RULE: &str =
    "must be 1-128 characters of A-Z a-z 0-9 _ . : @ = - /, not starting or ending with /";

/// `model.is_valid_log_name`: 1-128 of `A-Za-z0-9_.:@=-/`, not starting or ending with `/`.
pub fn is_valid_log_name(name: &str) -> bool {
    let ok = |b: u8| b.is_ascii_alphanumeric() || b"_.:@=-/".contains(&b);
    (1..=128).contains(&name.len())
        && name.bytes().all(ok)
        && !name.starts_with('/')
        && !name.ends_with('/')
}

/// A JSON string as RFC 8785 writes it: `"` and `\` escaped, the control characters as
/// `\b \t \n \f \r` or `\u00xx`, everything else (non-ASCII included) as itself.
fn put_json_str(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\u{08}' => out.extend_from_slice(b"\\b"),
            '\t' => out.extend_from_slice(b"\\t"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\u{0c}' => out.extend_from_slice(b"\\f"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\u{00}'..='\u{1f}' => {
                let b = c as u8;
                out.extend_from_slice(b"\\u00");
                out.push(b"0123456789abcdef"[usize::from(b >> 4)]);
                out.push(b"0123456789abcdef"[usize::from(b & 0xf)]);
            }
            _ => {
                let mut buf = [0u8; 4];
                out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes());
            }
        }
    }
    out.push(b'"');
}

/// One item of a leaf's canonical JSON array.
enum Item<'a> {
    Str(&'a str),
    Int(i64),
    Bool(bool),
}

fn leaf(items: &[Item<'_>]) -> Vec<u8> {
    let mut json = Vec::with_capacity(160);
    json.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            json.push(b',');
        }
        match item {
            Item::Str(s) => put_json_str(&mut json, s),
            Item::Int(v) => json.extend_from_slice(v.to_string().as_bytes()),
            Item::Bool(v) => json.extend_from_slice(if *v { b"true" } else { b"false" }),
        }
    }
    json.push(b']');
    pae(DOMAIN_TLOG_LEAF, &json)
}

/// `canonical.tlog_entry_leaf`: `PAE(tlog-leaf/v1, ["entry", run_id, seq, entry_hash])`.
pub fn entry_leaf(run_id: &str, seq: i64, entry_hash: &str) -> Vec<u8> {
    leaf(&[
        Item::Str("entry"),
        Item::Str(run_id),
        Item::Int(seq),
        Item::Str(entry_hash),
    ])
}

/// `canonical.tlog_seal_leaf`: `PAE(tlog-leaf/v1, ["seal", run_id, entry_count, head_hash,
/// last_input_offset, final, audit_head])`.
pub fn seal_leaf(
    run_id: &str,
    entry_count: i64,
    head_hash: &str,
    last_input_offset: i64,
    final_: bool,
    audit_head: &str,
) -> Vec<u8> {
    leaf(&[
        Item::Str("seal"),
        Item::Str(run_id),
        Item::Int(entry_count),
        Item::Str(head_hash),
        Item::Int(last_input_offset),
        Item::Bool(final_),
        Item::Str(audit_head),
    ])
}

/// `merkle.leaf_hash(tlog_entry_leaf(...))`
pub fn entry_leaf_hash(run_id: &str, seq: i64, entry_hash: &str) -> Hash {
    leaf_hash(&entry_leaf(run_id, seq, entry_hash))
}

/// `merkle.leaf_hash(tlog_seal_leaf(...))`
pub fn seal_leaf_hash(
    run_id: &str,
    entry_count: i64,
    head_hash: &str,
    last_input_offset: i64,
    final_: bool,
    audit_head: &str,
) -> Hash {
    leaf_hash(&seal_leaf(
        run_id,
        entry_count,
        head_hash,
        last_input_offset,
        final_,
        audit_head,
    ))
}

/// `canonical.tlog_origin`: `<log name>/<input topic>/<partition>/e<epoch>`.
pub fn origin(log_name: &str, input_topic: &str, partition: i32, epoch: i64) -> String {
    format!("{log_name}/{input_topic}/{partition}/e{epoch}")
}

/// An input topic the reference's checkpoint note takes in its origin: no `+`, no control
/// character or Unicode space (`notes.is_valid_key_name`, `_require_text`), and short enough
/// for the checkpoint to stay far below the smallest `max_output_bytes` (a Kafka topic name has
/// at most 249 characters). Anything else goes to the reference.
pub fn origin_names(input_topic: &str) -> bool {
    input_topic.len() <= 16 * 1024
        && input_topic
            .chars()
            .all(|c| c >= ' ' && c != '+' && !c.is_whitespace())
}

/// Standard base64 with padding (`base64.b64encode`).
pub fn b64encode(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 0x3f) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// `notes.key_id(name, SIG_ED25519, public_key)`: `SHA-256(name || "\n" || 0x01 || key)[:4]`.
fn note_key_id(name: &str, public_key: &[u8; 32]) -> [u8; 4] {
    let mut h = Sha256::new();
    h.update(name.as_bytes());
    h.update(b"\n");
    h.update([SIG_ED25519]);
    h.update(public_key);
    let digest = h.finalize();
    [digest[0], digest[1], digest[2], digest[3]]
}

/// `notes.log_checkpoint_note(origin, size, root, key.public, key.sign)`: the C2SP checkpoint
/// body (origin, size, base64 root) and one Ed25519 signature line under the origin's name.
pub fn checkpoint_note(origin: &str, size: u64, root: &Hash, key: &SigningKey) -> String {
    let body = format!("{origin}\n{size}\n{}\n", b64encode(root));
    let signature = key.sign(body.as_bytes()).to_bytes();
    let mut signed = Vec::with_capacity(4 + signature.len());
    signed.extend_from_slice(&note_key_id(origin, &key.verifying_key().to_bytes()));
    signed.extend_from_slice(&signature);
    format!("{body}\n\u{2014} {origin} {}\n", b64encode(&signed))
}

#[cfg(test)]
mod tests {
    use super::*;

    // The vectors below are `schemas.canonical` / `schemas.notes` outputs (Python reference).

    #[test]
    fn leaves_are_pae_over_canonical_json() {
        assert_eq!(
            entry_leaf("run-1", 3, "sha256:ab"),
            b"DSSEv1 22 bernstein/tlog-leaf/v1 31 [\"entry\",\"run-1\",3,\"sha256:ab\"]".to_vec()
        );
        assert_eq!(
            crate::hashing::hex_string(&entry_leaf_hash("run-1", 3, "sha256:ab")),
            "8ea084a1c17d4d06b480420aa68569f114d0ae49fadf75082a1c20034f1c4e75"
        );
        assert_eq!(
            seal_leaf("r", 2, "sha256:cd", 17, true, "hmac-sha256:ef"),
            b"DSSEv1 22 bernstein/tlog-leaf/v1 51 [\"seal\",\"r\",2,\"sha256:cd\",17,true,\"hmac-sha256:ef\"]"
                .to_vec()
        );
        let open = seal_leaf("r", 2, "h", -1, false, "");
        assert!(open.ends_with(b"[\"seal\",\"r\",2,\"h\",-1,false,\"\"]"));
    }

    #[test]
    fn json_strings_are_escaped_as_rfc8785_does() {
        let mut out = Vec::new();
        put_json_str(&mut out, "a\"b\\c\n\u{1}\u{7f}é");
        assert_eq!(out, "\"a\\\"b\\\\c\\n\\u0001\u{7f}é\"".as_bytes());
    }

    #[test]
    fn base64_is_standard_with_padding() {
        for (data, text) in [
            (&b""[..], ""),
            (b"f", "Zg=="),
            (b"fo", "Zm8="),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg=="),
            (b"\xfb\xff", "+/8="),
        ] {
            assert_eq!(b64encode(data), text);
        }
    }

    #[test]
    fn topics_a_note_names() {
        assert!(origin_names("bernstein.submissions"));
        assert!(origin_names("t\u{f6}pic\u{1f600}\u{7f}"));
        for bad in [
            "a b",
            "a+b",
            "a\nb",
            "a\u{1}",
            "a\u{a0}",
            "a\u{2028}",
            "a\u{3000}",
        ] {
            assert!(!origin_names(bad), "{bad:?}");
        }
        assert!(!origin_names(&"t".repeat(16 * 1024 + 1)));
    }

    #[test]
    fn log_names_follow_the_rule() {
        for good in ["bernstein", "a", "x/y", "a.b:c@d=e-f_g", &"n".repeat(128)] {
            assert!(is_valid_log_name(good), "{good}");
        }
        for bad in ["", "/a", "a/", "a b", "a+b", "é", &"n".repeat(129)] {
            assert!(!is_valid_log_name(bad), "{bad}");
        }
    }

    #[test]
    fn the_note_is_the_body_and_one_signature_line() {
        let key = SigningKey::from_bytes(&[7u8; 32]);
        let origin = origin("bernstein", "in", 0, 1);
        assert_eq!(origin, "bernstein/in/0/e1");
        assert_eq!(
            checkpoint_note(&origin, 0, &crate::merkle::empty_root(), &key),
            "bernstein/in/0/e1\n0\n47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU=\n\n\u{2014} bernstein/in/0/e1 \
             nkJTyxiGz33EPXi+Euntx3YKP2Zh8hFGqc7xenFVLkK9Z+xjlnjDEUItRW4JouD7LT/1FaaIG4nhsGsHM9jG0OEvOwg=\n"
        );
        let mut tree = crate::merkle::Frontier::new();
        for leaf in [b"a", b"b", b"c"] {
            tree.append(leaf_hash(leaf)).unwrap();
        }
        let origin = self::origin("dep/x", "bernstein.submissions", 5, 7);
        assert_eq!(
            checkpoint_note(&origin, tree.size(), &tree.root(), &key),
            "dep/x/bernstein.submissions/5/e7\n3\nNmQuc8JUCrEh46a/lUWwokmCzYMOsT080Z3jzmwCHsE=\n\n\
             \u{2014} dep/x/bernstein.submissions/5/e7 \
             Kz8WjbUPzd95a9DBLdPLfyd4H7JwfscG46K1mTSiKzdYgXU9Lrik2gUL88ustJYPFw0rpQTk0wfyAdy8IkbXwkxkwAU=\n"
        );
    }
}
