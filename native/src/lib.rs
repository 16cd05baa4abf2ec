//! `bernstein_native`: the scheduler's pure step function in Rust, for Python, and the byte
//! work of the restart fold and of the offline verifier.
//!
//! The pure modules (`core`, `records`, `fold`, `verify`, `hashing`, ...) hold no Python;
//! `bindings` converts between Python objects and them (`bindings::core::NativeCore`,
//! `FoldReader`, `FactReader`, the dump rows, the primitives), and `walk` runs the verifier
//! walks' plain path on their Python objects. This file lists the modules and registers the
//! extension.

mod alloc;
pub mod avro;
mod bindings;
pub mod blob_files;
pub mod core;
mod documents;
pub mod ed25519;
pub mod facts;
pub mod fold;
pub mod hashing;
pub mod merkle;
mod parallel;
pub mod producers;
pub mod records;
pub mod schemas;
pub mod state_json;
pub mod text;
pub mod tlog;
pub mod undo;
pub mod verify;
pub mod walk;

/// The step allocates a few dozen small strings and buffers per record; mimalloc serves
/// them faster than the system allocator (Python objects keep using Python's allocator).
/// Large transient buffers are mapped and reused instead (`alloc`): flat resident memory.
#[global_allocator]
static GLOBAL: alloc::Allocator = alloc::Allocator;

/// mimalloc v3's `mi_option_arena_eager_commit` (its `mi_option_e`; the Rust bindings name the v2 options).
const MI_OPTION_ARENA_EAGER_COMMIT: libmimalloc_sys::mi_option_t = 4;

/// Commit mimalloc's arenas page by page, as they are used. By default on Linux an arena is
/// committed whole, and with transparent huge pages the first allocations then cost several MiB
/// of resident memory at once, a step that lands in one process and not another. Still needed
/// beside `alloc`'s mapped large buffers: without it the verifier's growth was 10-12 MiB and
/// varied by up to 2.3 MiB between runs of 2,000 and 20,000 entries.
fn commit_arenas_lazily() {
    // SAFETY: sets a process-wide allocator option; reads and writes of options are atomic.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_ARENA_EAGER_COMMIT, 0) };
}

use pyo3::prelude::*;

#[pymodule]
fn bernstein_native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    commit_arenas_lazily();
    m.add_class::<bindings::core::NativeCore>()?;
    bindings::primitives::register(m)?;
    bindings::register_constants(m)?;
    bindings::verify_facts::register(m)?;
    bindings::register_facts(m)?;
    bindings::fold::register(m)?;
    walk::register(m)?;
    Ok(())
}
