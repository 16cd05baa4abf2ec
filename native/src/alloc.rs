//! The extension's global allocator: mimalloc for the many small allocations of the step and
//! the fact readers, and the OS directly, through a small cache, for large transient buffers.
//!
//! The verifier builds buffers of a few hundred KiB again and again: a batch signature check's
//! multiscalar tables (grown by doubling, for every 128 signatures) and each dump block's
//! decoded bytes. mimalloc returns freed pages to the OS only after a delay (1 s by default)
//! and does not always reuse them first, so resident memory rose with the length of a run until
//! that delay caught up: peak RSS that depended on timing, not on what the verifier holds.
//! Buffers of `LARGE` bytes or more are instead mapped with `mmap`; a freed one is kept in
//! `Cache` for the next buffer of the same size (the same sizes recur: every batch builds the
//! same tables), so resident memory is the live buffers plus at most `CACHE_BYTES`, whatever the
//! length of the run, and a recurring buffer costs neither a system call nor page faults.

use std::alloc::{GlobalAlloc, Layout};
use std::ptr;
use std::sync::{Mutex, MutexGuard, TryLockError};

use mimalloc::MiMalloc;

/// Allocations this large or larger are mapped, not taken from mimalloc.
pub const LARGE: usize = 64 * 1024;
/// Most bytes of freed mappings kept for reuse.
pub const CACHE_BYTES: usize = 4 << 20;
const SLOTS: usize = 8;
const PAGE: usize = 4096;

pub struct Allocator;

/// Freed mappings `(address, length)` kept for reuse by exact length; `(0, 0)` is an empty slot.
/// `std::sync::Mutex` neither allocates nor is ever held across an allocation here.
struct Cache {
    slots: [(usize, usize); SLOTS],
    next: usize,
}

static CACHE: Mutex<Cache> = Mutex::new(Cache {
    slots: [(0, 0); SLOTS],
    next: 0,
});

/// The cache, or None when another thread holds it: the caller then maps or unmaps directly.
/// Never waiting means no thread queues behind another, and a child forked while another thread
/// held the lock cannot hang on it.
fn cache() -> Option<MutexGuard<'static, Cache>> {
    match CACHE.try_lock() {
        Ok(guard) => Some(guard),
        Err(TryLockError::Poisoned(poisoned)) => Some(poisoned.into_inner()),
        Err(TryLockError::WouldBlock) => None,
    }
}

/// Mappings the cache gave up, for the caller to unmap once the lock is released.
struct Displaced {
    items: [(usize, usize); SLOTS + 1],
    len: usize,
}

impl Displaced {
    fn none() -> Self {
        Self {
            items: [(0, 0); SLOTS + 1],
            len: 0,
        }
    }

    fn one(mapping: (usize, usize)) -> Self {
        let mut out = Self::none();
        out.push(mapping);
        out
    }

    fn push(&mut self, mapping: (usize, usize)) {
        self.items[self.len] = mapping;
        self.len += 1;
    }

    fn unmap_all(&self) {
        for &(address, len) in &self.items[..self.len] {
            // SAFETY: mappings the cache owned and nothing uses.
            unsafe { unmap(address as *mut u8, len) };
        }
    }
}

impl Cache {
    /// A kept mapping of exactly `len` bytes, now the caller's.
    fn take(&mut self, len: usize) -> Option<usize> {
        let slot = self.slots.iter_mut().find(|(_, l)| *l == len)?;
        Some(std::mem::take(slot).0)
    }

    /// Keep a freed mapping: in a free slot, else in place of a kept one (slots taken in turn);
    /// then other kept mappings are given up, lowest slot first, until the kept bytes fit
    /// `CACHE_BYTES`. The new mapping is always kept unless it alone is over the budget. What
    /// is given up is returned.
    fn keep(&mut self, address: usize, len: usize) -> Displaced {
        if len > CACHE_BYTES {
            return Displaced::one((address, len));
        }
        let mut out = Displaced::none();
        let slot = match self.slots.iter().position(|&(_, l)| l == 0) {
            Some(free) => free,
            None => {
                self.next = (self.next + 1) % SLOTS;
                self.next
            }
        };
        let displaced = std::mem::replace(&mut self.slots[slot], (address, len));
        if displaced.1 != 0 {
            out.push(displaced);
        }
        while self.slots.iter().map(|&(_, l)| l).sum::<usize>() > CACHE_BYTES {
            let Some(other) = (0..SLOTS).find(|&i| i != slot && self.slots[i].1 != 0) else {
                break;
            };
            out.push(std::mem::take(&mut self.slots[other]));
        }
        out
    }
}

fn mapped(size: usize, align: usize) -> bool {
    size >= LARGE && align <= PAGE
}

fn pages(size: usize) -> usize {
    size.div_ceil(PAGE) * PAGE
}

/// A mapping of `len` bytes (a multiple of `PAGE`), kept or new; `zeroed` when new.
unsafe fn map(len: usize) -> (*mut u8, bool) {
    if let Some(address) = cache().and_then(|mut cache| cache.take(len)) {
        return (address as *mut u8, false);
    }
    // SAFETY: an anonymous private mapping, owned by the caller until `release`.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        (ptr::null_mut(), true)
    } else {
        (p.cast(), true)
    }
}

unsafe fn unmap(p: *mut u8, len: usize) {
    // SAFETY: `p` is a mapping of `len` bytes that nothing uses any more.
    unsafe { libc::munmap(p.cast(), len) };
}

/// A mapping the caller no longer uses: kept for reuse, or unmapped.
unsafe fn release(p: *mut u8, len: usize) {
    let displaced = match cache() {
        Some(mut cache) => cache.keep(p as usize, len),
        None => Displaced::one((p as usize, len)),
    };
    displaced.unmap_all();
}

unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if mapped(layout.size(), layout.align()) {
            unsafe { map(pages(layout.size())).0 }
        } else {
            unsafe { MiMalloc.alloc(layout) }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if mapped(layout.size(), layout.align()) {
            let (p, zeroed) = unsafe { map(pages(layout.size())) };
            if !zeroed {
                // SAFETY: a kept mapping of at least `layout.size()` bytes.
                unsafe { ptr::write_bytes(p, 0, layout.size()) };
            }
            p
        } else {
            unsafe { MiMalloc.alloc_zeroed(layout) }
        }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        if mapped(layout.size(), layout.align()) {
            unsafe { release(p, pages(layout.size())) }
        } else {
            unsafe { MiMalloc.dealloc(p, layout) }
        }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let (old, new) = (layout.size(), new_size);
        match (mapped(old, layout.align()), mapped(new, layout.align())) {
            (false, false) => unsafe { MiMalloc.realloc(p, layout, new_size) },
            (true, true) if pages(old) == pages(new) => p,
            _ => {
                // SAFETY: `new` is non-zero and, with `layout.align()`, a valid layout (GlobalAlloc's contract).
                let q =
                    unsafe { self.alloc(Layout::from_size_align_unchecked(new, layout.align())) };
                if !q.is_null() {
                    // SAFETY: both blocks hold at least the smaller size; they do not overlap.
                    unsafe { ptr::copy_nonoverlapping(p, q, old.min(new)) };
                    unsafe { self.dealloc(p, layout) };
                }
                q
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn empty() -> Cache {
        Cache {
            slots: [(0, 0); SLOTS],
            next: 0,
        }
    }

    fn lens(d: &Displaced) -> Vec<usize> {
        d.items[..d.len].iter().map(|&(_, l)| l).collect()
    }

    #[test]
    fn a_kept_mapping_is_reused_only_at_its_exact_length() {
        let mut cache = empty();
        assert!(lens(&cache.keep(0x10000, 48 * PAGE)).is_empty());
        assert_eq!(cache.take(32 * PAGE), None);
        assert_eq!(cache.take(48 * PAGE), Some(0x10000));
        assert_eq!(cache.take(48 * PAGE), None, "taken once");
    }

    #[test]
    fn the_cache_stays_within_its_byte_budget_keeping_the_new_mapping() {
        let mut cache = empty();
        let quarter = CACHE_BYTES / 4;
        for i in 1..=4 {
            assert!(lens(&cache.keep(0x100000 * i, quarter)).is_empty());
        }
        // a fifth quarter displaces one of the others, never itself
        let displaced = cache.keep(0x900000, quarter);
        assert_eq!(lens(&displaced), vec![quarter]);
        assert_ne!(displaced.items[0].0, 0x900000);
        let kept: Vec<usize> = (0..4).filter_map(|_| cache.take(quarter)).collect();
        assert_eq!(kept.len(), 4);
        assert!(kept.contains(&0x900000));
        // one mapping larger than the budget is never kept
        assert_eq!(
            lens(&cache.keep(0xA00000, CACHE_BYTES + PAGE)),
            vec![CACHE_BYTES + PAGE]
        );
        assert_eq!(cache.take(CACHE_BYTES + PAGE), None);
    }

    #[test]
    fn more_lengths_than_slots_displace_the_older_ones() {
        let mut cache = empty();
        let mut displaced = 0;
        for i in 1..=SLOTS + 3 {
            displaced += cache.keep(0x100000 * i, 16 * PAGE + i * PAGE).len;
        }
        assert_eq!(displaced, 3);
        assert_eq!(
            cache.take(16 * PAGE + (SLOTS + 3) * PAGE),
            Some(0x100000 * (SLOTS + 3))
        );
    }

    #[test]
    fn a_busy_cache_is_bypassed_not_waited_for() {
        let held = CACHE
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let a = Allocator;
        unsafe {
            let layout = Layout::from_size_align(2 * LARGE, 8).unwrap();
            let p = a.alloc(layout); // would wait for ever with a blocking lock
            assert!(!p.is_null());
            std::ptr::write_bytes(p, 7, layout.size());
            a.dealloc(p, layout);
        }
        drop(held);
    }

    #[test]
    fn large_buffers_keep_their_bytes_through_growth_and_come_back_zeroed() {
        let a = Allocator;
        unsafe {
            let small = Layout::from_size_align(1000, 8).unwrap();
            let p = a.alloc(small);
            for i in 0..1000 {
                *p.add(i) = (i % 251) as u8;
            }
            // small -> mapped -> larger mapping -> within the same pages -> a page more -> small
            let mut layout = small;
            let mut p = p;
            for size in [
                LARGE + 1,
                3 * LARGE - 100,
                3 * LARGE - 7,
                3 * LARGE + 7,
                900,
            ] {
                let before = p;
                p = a.realloc(p, layout, size);
                assert!(!p.is_null());
                if size == 3 * LARGE - 7 {
                    assert_eq!(p, before, "same page count: the mapping is kept in place");
                }
                for i in 0..900 {
                    assert_eq!(
                        *p.add(i),
                        (i % 251) as u8,
                        "byte {i} after growing to {size}"
                    );
                }
                layout = Layout::from_size_align(size, 8).unwrap();
            }
            a.dealloc(p, layout);
            let big = Layout::from_size_align(2 * LARGE, 16).unwrap();
            let q = a.alloc(big);
            std::ptr::write_bytes(q, 0xFF, big.size());
            a.dealloc(q, big); // kept in the cache, full of 0xFF
            let z = a.alloc_zeroed(big);
            assert!((0..big.size()).all(|i| *z.add(i) == 0));
            a.dealloc(z, big);
        }
    }
}
