//! Memory freed by a burst of work, handed back to the system when the burst ends.
//!
//! The `moat` binary allocates with mimalloc (see `src/main.rs`), which returns freed pages to
//! the system lazily, on later allocations: a server that goes idle after compiling its plugins
//! would keep the compilers' peak resident. [`release_freed`] ends such a burst.

/// Hands the pages freed so far back to the system: this thread's, and every page already
/// returned to mimalloc's arenas by any thread. A thread that outlives the burst (a pool's
/// worker) must call it too for its own pages. Without mimalloc as the global allocator it
/// finds nothing to do.
pub fn release_freed() {
    // SAFETY: takes no pointers; mimalloc may collect at any time on any thread.
    unsafe { libmimalloc_sys::mi_collect(true) }
}
