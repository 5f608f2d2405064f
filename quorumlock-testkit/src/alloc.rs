//! A global allocator that counts, for benchmarks that report heap bytes
//! and allocations: install it with
//! `#[global_allocator] static ALLOC: Counting = Counting;` and read
//! [`Counting::snapshot`] before and after the work measured.
//!
//! The counters are process-wide relaxed atomics: exact once the threads
//! measured are quiet, as they are when a single-threaded runtime is read
//! between awaits.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// The system allocator, counting what passes through it.
pub struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED: AtomicU64 = AtomicU64::new(0);
static FREED: AtomicU64 = AtomicU64::new(0);

/// The counters at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Allocations made so far (a reallocation counts as one).
    pub allocations: u64,
    /// Bytes allocated so far.
    pub allocated: u64,
    /// Bytes freed so far.
    pub freed: u64,
}

impl Snapshot {
    /// Bytes in use: allocated and not freed.
    pub fn live(&self) -> i64 {
        self.allocated as i64 - self.freed as i64
    }
}

impl Counting {
    /// The counters now.
    pub fn snapshot() -> Snapshot {
        Snapshot {
            allocations: ALLOCATIONS.load(Ordering::Relaxed),
            allocated: ALLOCATED.load(Ordering::Relaxed),
            freed: FREED.load(Ordering::Relaxed),
        }
    }
}

// SAFETY: every call is passed to `System` unchanged; the counters have no
// effect on the memory returned.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        ALLOCATED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        FREED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: the caller's contract is System's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract is System's.
        let moved = unsafe { System.realloc(ptr, layout, new_size) };
        // A failed reallocation leaves the old block in place.
        if !moved.is_null() {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
            ALLOCATED.fetch_add(new_size as u64, Ordering::Relaxed);
            FREED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        }
        moved
    }
}
