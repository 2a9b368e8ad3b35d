//! The head-major copy of attention's input, which the f32 kernels read many times per
//! unit.

use super::{AttentionShape, PARALLEL_MIN_VALUES};
use crate::cpu::{OutPtr, in_parallel};

/// `out[part][head][t][c] = qkv[t][part · hidden + head · d + c]`, token ranges in parallel.
pub(super) fn to_head_major(
    qkv: &[f32],
    tokens: usize,
    shape: AttentionShape,
    out: &mut [f32],
    threads: usize,
) {
    let (h, d) = (shape.hidden, shape.head_dim());
    let pieces = if qkv.len() < PARALLEL_MIN_VALUES {
        1
    } else {
        threads.max(1)
    };
    let dst = OutPtr(out.as_mut_ptr());
    in_parallel(tokens, 1, pieces, |range| {
        let dst = &dst;
        for t in range {
            let row = &qkv[t * 3 * h..(t + 1) * 3 * h];
            for (k, values) in row.chunks_exact(d).enumerate() {
                // Chunk k of the row is part k / heads, head k % heads.
                let at = (k * tokens + t) * d;
                // SAFETY: at + d <= 3 · hidden · tokens = out.len(); the token ranges are
                // disjoint, so no other thread writes these values.
                unsafe { copy_run(values, dst.0.add(at)) };
            }
        }
    });
}

/// Copies `src` to `dst` in runs of eight: a head's few dozen values, which a call to
/// `memcpy` per head would cost more than it moves.
///
/// # Safety
/// `dst` points to `src.len()` writable values that do not overlap `src`.
#[inline(always)]
unsafe fn copy_run(src: &[f32], dst: *mut f32) {
    let mut runs = src.chunks_exact(8);
    let mut at = dst;
    for run in &mut runs {
        let run: &[f32; 8] = run.try_into().expect("chunks of eight");
        // SAFETY: eight values of dst, inside the caller's range.
        unsafe {
            at.cast::<[f32; 8]>().write_unaligned(*run);
            at = at.add(8);
        }
    }
    for (i, v) in runs.remainder().iter().enumerate() {
        // SAFETY: inside the caller's range.
        unsafe { *at.add(i) = *v };
    }
}
