//! The one place this crate uses threads: a pure function mapped over a slice on several
//! cores (verifying a batch's producer signatures ahead of its steps, `Core::preverify`).
//!
//! Deterministic by construction: each item's result depends on that item alone, and the
//! results are returned in the items' order whatever the scheduling. No state is shared but
//! the read-only inputs.

/// The number of cores the machine offers (1 when it cannot tell).
pub fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, std::num::NonZero::get)
}

/// `items.iter().filter_map(f)` on up to `threads` threads, in the items' order.
pub fn filter_map<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> Option<R> + Sync,
) -> Vec<R> {
    map_chunks(items, threads, |part| part.iter().filter_map(&f).collect())
}

/// `f` over up to `threads` contiguous parts of `items` (one a thread), the parts' results
/// concatenated in the items' order: for work that is cheaper done many items at once
/// (`ed25519::verify_many`).
pub fn map_chunks<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&[T]) -> Vec<R> + Sync,
) -> Vec<R> {
    let threads = threads.clamp(1, 8).min(items.len().div_ceil(16).max(1));
    if threads == 1 {
        return f(items);
    }
    let chunk = items.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|scope| {
        let mut parts = items.chunks(chunk);
        let first = parts.next().unwrap_or(&[]);
        let handles: Vec<_> = parts.map(|part| scope.spawn(move || f(part))).collect();
        let mut all: Vec<R> = f(first);
        for handle in handles {
            match handle.join() {
                Ok(results) => all.extend(results),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        all
    })
}
