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
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};

/// One cache line of bytes: the unit of allocation, so the first value is 64-byte aligned.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; LINE_BYTES]);

const LINE_BYTES: usize = 64;

/// A value type these buffers may hold: plain bits, where all-zero bytes are zero and every
/// bit pattern is a value. Sealed: only the types below.
pub trait Element: Copy + sealed::Sealed {}
impl Element for f32 {}
/// 16-bit weights (f16 or bf16) as their raw bits.
impl Element for u16 {}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for u16 {}
}

/// A growable run of `T` that starts on a 64-byte boundary; reads as a slice.
pub struct Aligned<T: Element> {
    lines: Vec<Line>,
    len: usize,
    values: PhantomData<T>,
}

/// f32 on a cache line: weights and activations.
pub type AlignedVec = Aligned<f32>;

impl<T: Element> Aligned<T> {
    const PER_LINE: usize = LINE_BYTES / std::mem::size_of::<T>();

    /// A copy of `values`.
    pub fn from_slice(values: &[T]) -> Self {
        let mut v = Self::default();
        v.resize(values.len());
        v.copy_from_slice(values);
        v
    }

    /// Sets the length to `len`: values past the old length are zero, the rest keep theirs.
    /// Never gives memory back, so a buffer grown to the largest batch stays that size.
    pub fn resize(&mut self, len: usize) {
        if len > self.len {
            // The tail of the last line may hold values from an earlier, longer length.
            let tail_end = (self.lines.len() * Self::PER_LINE).min(len);
            let old = self.len;
            self.len = tail_end;
            // SAFETY: `old..tail_end` lies inside `lines` (tail_end <= its capacity in T),
            // and all-zero bytes are a value of every `Element`.
            unsafe {
                let start = self.lines.as_mut_ptr().cast::<T>().add(old);
                std::ptr::write_bytes(start, 0, tail_end - old);
            }
        }
        self.lines
            .resize(len.div_ceil(Self::PER_LINE), Line([0; LINE_BYTES]));
        self.len = len;
    }
}

impl<T: Element> Default for Aligned<T> {
    fn default() -> Self {
        Aligned {
            lines: Vec::new(),
            len: 0,
            values: PhantomData,
        }
    }
}

impl<T: Element> Clone for Aligned<T> {
    fn clone(&self) -> Self {
        Aligned {
            lines: self.lines.clone(),
            len: self.len,
            values: PhantomData,
        }
    }
}

impl<T: Element> Deref for Aligned<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: `lines` is `lines.len() * 64` contiguous, initialised bytes starting on a
        // 64-byte boundary (`Line` is `repr(C)`, 64 bytes, aligned to 64), which is
        // `lines.len() * PER_LINE` values of `T` (every bit pattern is one, `Element`), and
        // `len <= lines.len() * PER_LINE` always holds.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr().cast::<T>(), self.len) }
    }
}

impl<T: Element> DerefMut for Aligned<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, through the unique borrow of `lines`.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr().cast::<T>(), self.len) }
    }
}

impl<T: Element + fmt::Debug> fmt::Debug for Aligned<T> {
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
    fn sixteen_bit_values_start_on_a_cache_line_too() {
        let mut v = super::Aligned::<u16>::from_slice(&[7; 33]);
        assert_eq!(v.as_ptr() as usize % 64, 0);
        v.resize(31);
        v.resize(64);
        assert_eq!(&v[..31], &[7; 31]);
        assert!(v[31..].iter().all(|&x| x == 0));
    }

    #[test]
    fn clones_are_aligned_and_equal() {
        let v = AlignedVec::from_slice(&[1.0; 33]);
        let c = v.clone();
        assert_eq!(c.as_ptr() as usize % 64, 0);
        assert_eq!(&c[..], &v[..]);
    }
}
