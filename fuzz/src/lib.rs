//! What every fuzz target shares: a global allocator that counts the bytes held, so that a
//! target can be held to `gateway::fuzzing::memory_bound` of its input, and the set-up done
//! once before the first input.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The system allocator, counting what is held now and the most held since a reset.
struct Counting;

static HELD: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; the counters only
// observe the sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is System's.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        HELD.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            // A moving realloc holds both blocks for a moment: count the new one first.
            grew(new_size);
            HELD.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

fn grew(size: usize) {
    let now = HELD.fetch_add(size, Ordering::Relaxed) + size;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Builds the fixtures (synthetic encoder, runtime) before the first input, so that no
/// input is charged for them.
pub fn init() {
    gateway::fuzzing::init();
}

/// Runs `target` on `data` and fails if it held more than its bound at any moment. With
/// `TANDEM_FUZZ_PEAK=1` it prints each input's peak instead of only checking it (for
/// measuring bounds over a corpus: `-runs=0`).
pub fn check(name: &str, data: &[u8], target: impl FnOnce(&[u8])) {
    let before = HELD.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    target(data);
    let peak = PEAK.load(Ordering::Relaxed).saturating_sub(before);
    let bound = gateway::fuzzing::memory_bound(name, data.len());
    if std::env::var_os("TANDEM_FUZZ_PEAK").is_some() {
        eprintln!(
            "peak {name}: {peak} bytes for {} input bytes ({:.1}x)",
            data.len(),
            peak as f64 / data.len().max(1) as f64
        );
    }
    assert!(
        peak <= bound,
        "{name} held {peak} bytes at its peak for an input of {} bytes; the bound is {bound}",
        data.len()
    );
}
