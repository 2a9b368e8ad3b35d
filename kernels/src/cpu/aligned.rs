//! f32 storage that starts on a cache line.
//!
//! A `Vec<f32>` large enough for the allocator to map it (a 784×1024 weight matrix, a
//! batch of activations) starts 16 bytes past a page boundary when the allocator maps it,
//! and anywhere on a 16-byte boundary when it does not; at 16 bytes off, every other
//! 32-byte AVX load in the small-batch kernel straddles two cache lines, which costs
//! throughput (`cargo test --release -p kernels --lib alignment_cost -- --ignored
//! --nocapture`; for the input alone, `cargo bench -p kernels --bench gemm --
//! input_alignment`). Weights and the activations between layers live here, so where they
//! start does not depend on the allocator.
//!
//! A buffer of at least 2 MiB (a large layer's weights) starts on a 2 MiB boundary instead,
//! and asks the kernel for transparent huge pages before it is first written. In a serving
//! process the HTTP threads evict the weights from the caches between batches, so each
//! batch streams them again; on 4 KiB pages a 7 MB layer spans ~1,800 pages, more than the
//! TLB holds, and the page walks of that stream come on top of its misses, which 2 MiB pages
//! remove. It matters for small batches whose weights were evicted between calls, and not
//! when they stay hot (`tandem-bench forward --evict-mib`). The price is at most one partly
//! used huge page per buffer; where the kernel gives no huge pages the advice changes nothing.

use std::alloc::{self, Layout};
use std::fmt;
use std::marker::PhantomData;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

/// One cache line: the alignment of every buffer, so the first value is on a line.
const LINE_BYTES: usize = 64;
/// Buffers at least this large start on a huge-page boundary and ask for huge pages.
const HUGE_PAGE: usize = 2 << 20;

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

/// A growable run of `T` that starts on a 64-byte boundary (a 2 MiB one from 2 MiB up);
/// reads as a slice.
pub struct Aligned<T: Element> {
    /// `capacity` values; dangling while `capacity` is 0.
    ptr: NonNull<T>,
    len: usize,
    /// Values from the start that hold something written (`len` or more).
    written: usize,
    capacity: usize,
    values: PhantomData<T>,
}

// SAFETY: an `Aligned` owns its allocation as a `Vec` does, and `Element`s are plain bits.
unsafe impl<T: Element> Send for Aligned<T> {}
// SAFETY: shared access only reads, through `Deref`.
unsafe impl<T: Element> Sync for Aligned<T> {}

/// f32 on a cache line: weights and activations.
pub type AlignedVec = Aligned<f32>;

impl<T: Element> Aligned<T> {
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
        if len > self.capacity {
            // Doubling, as a Vec grows, for activations that follow the batch size; a
            // buffer that starts empty (weights) gets exactly what it asked for.
            self.reallocate(len.max(self.capacity * 2));
        }
        self.zero(self.len..len);
        self.len = len;
        self.written = self.written.max(len);
    }

    /// Sets the length to `len` for a caller that writes every value before reading it:
    /// values past the old length are left as the buffer last held them (zero where it never
    /// held any), so a scratch buffer that shrinks and grows from call to call is not zeroed
    /// on every call.
    pub fn resize_for_overwrite(&mut self, len: usize) {
        if len > self.capacity {
            self.reallocate(len.max(self.capacity * 2));
        }
        self.zero(self.written..len);
        self.len = len;
        self.written = self.written.max(len);
    }

    /// Zeroes the values `range` (ending within the capacity); nothing if it is empty.
    fn zero(&mut self, range: std::ops::Range<usize>) {
        if range.end > range.start {
            // SAFETY: the range lies inside the allocation (end <= capacity), and all-zero
            // bytes are a value of every `Element`.
            unsafe {
                std::ptr::write_bytes(self.ptr.as_ptr().add(range.start), 0, range.len());
            }
        }
    }

    fn layout(capacity: usize) -> Layout {
        // Past isize::MAX bytes no allocation could succeed: a panic, as `Vec` gives.
        let bytes = capacity
            .checked_mul(std::mem::size_of::<T>())
            .expect("buffer size overflows usize");
        let align = if bytes >= HUGE_PAGE {
            HUGE_PAGE
        } else {
            LINE_BYTES
        };
        Layout::from_size_align(bytes, align).expect("buffer size overflows isize")
    }

    /// Moves the values to a new allocation of `capacity` (> 0) values.
    fn reallocate(&mut self, capacity: usize) {
        let layout = Self::layout(capacity);
        // SAFETY: the layout has a non-zero size (capacity > 0, and no `Element` is a
        // zero-sized type).
        let raw = unsafe { alloc::alloc(layout) };
        let Some(new) = NonNull::new(raw.cast::<T>()) else {
            alloc::handle_alloc_error(layout);
        };
        if layout.align() == HUGE_PAGE {
            advise_huge_pages(raw, layout.size());
        }
        if self.capacity > 0 {
            // SAFETY: both allocations hold at least `len` values and do not overlap; the
            // old one was made with the layout of its capacity.
            unsafe {
                std::ptr::copy_nonoverlapping(self.ptr.as_ptr(), new.as_ptr(), self.len);
                alloc::dealloc(self.ptr.as_ptr().cast(), Self::layout(self.capacity));
            }
        }
        self.ptr = new;
        self.capacity = capacity;
        // Only the first `len` values were copied.
        self.written = self.len;
    }
}

/// Asks the kernel to back a fresh, not yet written allocation (starting on a huge-page
/// boundary) with transparent huge pages. Advice only: where they are off, or none are
/// free, the pages are ordinary ones, and the buffer works the same.
fn advise_huge_pages(start: *mut u8, bytes: usize) {
    // SAFETY: the range is an allocation this buffer owns; the advice changes how its pages
    // are backed, never their contents, and its failure is harmless.
    unsafe {
        libc::madvise(start.cast(), bytes, libc::MADV_HUGEPAGE);
    }
}

impl<T: Element> Drop for Aligned<T> {
    fn drop(&mut self) {
        if self.capacity > 0 {
            // SAFETY: allocated in `reallocate` with the layout of this capacity.
            unsafe { alloc::dealloc(self.ptr.as_ptr().cast(), Self::layout(self.capacity)) };
        }
    }
}

impl<T: Element> Default for Aligned<T> {
    fn default() -> Self {
        Aligned {
            ptr: NonNull::dangling(),
            len: 0,
            written: 0,
            capacity: 0,
            values: PhantomData,
        }
    }
}

impl<T: Element> Clone for Aligned<T> {
    fn clone(&self) -> Self {
        Self::from_slice(self)
    }
}

impl<T: Element> Deref for Aligned<T> {
    type Target = [T];

    fn deref(&self) -> &[T] {
        // SAFETY: `ptr` holds `capacity >= written >= len` values, the first `written`
        // initialised (growth past them zero-fills); while empty it is dangling but aligned, which a slice of
        // length 0 allows.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl<T: Element> DerefMut for Aligned<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as in `deref`, through the unique borrow of `self`.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
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
    fn growing_for_overwrite_keeps_old_values_and_zeroes_only_new_memory() {
        let mut v = AlignedVec::default();
        v.resize(8);
        v[..5].copy_from_slice(&[1.0, 2.0, 3.0, 4.0, 5.0]);
        v.resize_for_overwrite(2);
        v.resize_for_overwrite(7);
        assert_eq!(&v[..], &[1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0]);
        // A reallocation copies only the length: what lay past it is gone, and reads as 0.
        v.resize(3);
        v.resize_for_overwrite(10_000);
        assert_eq!(&v[..4], &[1.0, 2.0, 3.0, 0.0]);
        assert!(v[4..].iter().all(|&x| x == 0.0));
        // `resize` still zero-fills where `resize_for_overwrite` left values.
        v[9_999] = 9.0;
        v.resize(1);
        v.resize(10_000);
        assert!(v[1..].iter().all(|&x| x == 0.0));
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
    fn buffers_of_two_mib_start_on_a_huge_page_and_keep_their_values_as_they_grow() {
        let mut v = AlignedVec::from_slice(&[3.0; 1000]);
        assert_eq!(v.as_ptr() as usize % 64, 0);
        v.resize(600_000); // 2.4 MB
        assert_eq!(v.as_ptr() as usize % (2 << 20), 0);
        assert!(v[..1000].iter().all(|&x| x == 3.0));
        assert!(v[1000..].iter().all(|&x| x == 0.0));
        let c = v.clone();
        assert_eq!(c.as_ptr() as usize % (2 << 20), 0);
        assert_eq!(&c[..], &v[..]);
    }

    #[test]
    fn clones_are_aligned_and_equal() {
        let v = AlignedVec::from_slice(&[1.0; 33]);
        let c = v.clone();
        assert_eq!(c.as_ptr() as usize % 64, 0);
        assert_eq!(&c[..], &v[..]);
    }
}
