//! f32 storage that starts on a cache line.
//!
//! A `Vec<f32>` large enough for the allocator to map it (a 784×1024 weight matrix, a
//! batch of activations) starts 16 bytes past a page boundary when the allocator maps it,
//! and anywhere on a 16-byte boundary when it does not; at 16 bytes off, every other
//! 32-byte AVX load in the small-batch kernel straddles two cache lines. What that costs
//! moved between experiments: 3–6% with both buffers off a line, in place
//! (`cargo test --release -p kernels --lib alignment_cost -- --ignored --nocapture`), up
//! to 28% in a first experiment that allocated fresh buffers for each case (not kept),
//! and 1–13% for the input alone through the public API (`cargo bench -p kernels --bench
//! gemm -- input_alignment`). Weights and the activations between layers live here, so
//! where they start no longer depends on the allocator.

use std::fmt;
use std::ops::{Deref, DerefMut};

/// One cache line of values: the unit of allocation, so the first value is 64-byte aligned.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([f32; LINE]);

const LINE: usize = 16;

/// A growable run of f32 that starts on a 64-byte boundary; reads as a slice.
#[derive(Clone, Default)]
pub struct AlignedVec {
    lines: Vec<Line>,
    len: usize,
}

impl AlignedVec {
    /// A copy of `values`.
    pub fn from_slice(values: &[f32]) -> AlignedVec {
        let mut v = AlignedVec::default();
        v.resize(values.len());
        v.copy_from_slice(values);
        v
    }

    /// Sets the length to `len`: values past the old length are zero, the rest keep theirs.
    /// Never gives memory back, so a buffer grown to the largest batch stays that size.
    pub fn resize(&mut self, len: usize) {
        if len > self.len {
            // The tail of the last line may hold values from an earlier, longer length.
            let tail_end = (self.lines.len() * LINE).min(len);
            let old = self.len;
            self.len = tail_end;
            self[old..].fill(0.0);
        }
        self.lines.resize(len.div_ceil(LINE), Line([0.0; LINE]));
        self.len = len;
    }
}

impl Deref for AlignedVec {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        // SAFETY: `Line` is `repr(C)` around `[f32; 16]` and exactly 64 bytes (its alignment
        // equals its size), so `lines` is `lines.len() * 16` contiguous, initialised f32s,
        // and `len <= lines.len() * 16` always holds.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<f32>(), self.len) }
    }
}

impl DerefMut for AlignedVec {
    fn deref_mut(&mut self) -> &mut [f32] {
        // SAFETY: as in `deref`, through the unique borrow of `lines`.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<f32>(), self.len) }
    }
}

impl fmt::Debug for AlignedVec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::AlignedVec;

    #[test]
    fn starts_on_a_cache_line_at_every_size() {
        for len in [1, 15, 16, 17, 1000, 802_816] {
            let v = AlignedVec::from_slice(&vec![1.5; len]);
            assert_eq!(v.as_ptr() as usize % 64, 0, "len {len}");
            assert_eq!(v.len(), len);
            assert!(v.iter().all(|&x| x == 1.5));
        }
    }

    #[test]
    fn growing_zero_fills_even_where_a_longer_length_left_values() {
        let mut v = AlignedVec::from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        v.resize(2);
        assert_eq!(&v[..], &[1.0, 2.0]);
        // Same line: the old 3, 4, 5 must not come back.
        v.resize(6);
        assert_eq!(&v[..], &[1.0, 2.0, 0.0, 0.0, 0.0, 0.0]);
        // Past the line, too.
        v[5] = 9.0;
        v.resize(40);
        assert_eq!(v[5], 9.0);
        assert!(v[6..].iter().all(|&x| x == 0.0));
        v.resize(0);
        assert!(v.is_empty());
        v.resize(3);
        assert_eq!(&v[..], &[0.0; 3]);
    }

    #[test]
    fn clones_are_aligned_and_equal() {
        let v = AlignedVec::from_slice(&[1.0; 33]);
        let c = v.clone();
        assert_eq!(c.as_ptr() as usize % 64, 0);
        assert_eq!(&c[..], &v[..]);
    }
}
