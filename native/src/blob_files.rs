//! The one place the extension reads files: the verifier re-hashes stored evidence blobs here
//! (`FactReader.hash_files`, GIL released). Never used by the scheduler's step, which takes no
//! I/O (tests/unit/differential/test_native_core.py allows `std::fs` / `std::io` in this file alone).

use sha2::{Digest, Sha256};

use crate::hashing::digest_string;

const READ_BYTES: usize = 256 * 1024;

/// A stored blob re-hashed: (`sha256:<hex>`, byte length, the bytes when asked for).
pub type HashedFile = (String, u64, Option<Vec<u8>>);

/// Re-hash the regular file at `path` (at most `max_bytes`, in 256 KiB reads), keeping its bytes
/// when `keep`. None for anything the caller must look at itself (missing, not a regular file, a
/// symlink as last component, larger than `max_bytes`, a read error, not Linux): its own path then
/// says exactly what is wrong. Like `substrate.cas.open_regular`: `O_NOFOLLOW`, `O_NONBLOCK`
/// (a FIFO never blocks the open), nothing but a regular file is read.
pub fn hash_file(
    path: &str,
    max_bytes: u64,
    keep: bool,
    buffer: &mut Vec<u8>,
) -> Option<HashedFile> {
    #[cfg(target_os = "linux")]
    {
        use std::io::Read;
        use std::os::unix::fs::OpenOptionsExt;
        const O_NOCTTY: i32 = 0o400;
        const O_NONBLOCK: i32 = 0o4000;
        const O_NOFOLLOW: i32 = 0o400000;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(O_NOFOLLOW | O_NONBLOCK | O_NOCTTY)
            .open(path)
            .ok()?;
        let info = file.metadata().ok()?;
        if !info.file_type().is_file() || info.len() > max_bytes {
            return None;
        }
        // 256 KiB reads: each read's bytes are still in the core's cache when they are hashed
        if buffer.len() < READ_BYTES {
            buffer.resize(READ_BYTES, 0);
        }
        let mut hasher = Sha256::new();
        let mut kept = keep.then(|| Vec::with_capacity(usize::try_from(info.len()).unwrap_or(0)));
        let mut total: u64 = 0;
        loop {
            let n = match file.read(buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => return None,
            };
            total += n as u64;
            if total > max_bytes {
                return None; // grown since the stat: never read past the bound
            }
            hasher.update(&buffer[..n]);
            if let Some(kept) = kept.as_mut() {
                kept.extend_from_slice(&buffer[..n]);
            }
        }
        Some((digest_string("sha256:", &hasher.finalize()), total, kept))
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = (path, max_bytes, keep, buffer);
        None
    }
}
