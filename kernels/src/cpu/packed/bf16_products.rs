//! The panel kernel with bfloat16 products (AVX-512 BF16): `vdpbf16ps` multiplies sixteen
//! pairs of bf16 values and adds each pair's two products to an f32 lane, so one
//! instruction does the work of two f32 multiply-adds. Weights and inputs are rounded to
//! bf16 (8 significant bits, to nearest even; the instructions flush subnormals to zero);
//! the products of two bf16 values are exact in f32 and are summed in f32, so the error is
//! the rounding of the operands alone.
//!
//! A panel here holds its weights by pairs of input features, `[panels][k/2][PANEL][2]`:
//! the sixteen outputs' weights for features `2i` and `2i + 1`, interleaved, are one
//! register. An input row is rounded once per layer into pairs the same way, so the value
//! broadcast to every lane is one 32-bit load. The tiles, the row blocks and the epilogue
//! are those of the f32 kernel (`super::avx512::drive`).

use std::arch::x86_64::*;
use std::ops::Range;

use half::bf16;

use super::avx512::{Tiles, drive};
use super::{PANEL, Shape};
use crate::Activation;
use crate::cpu::Aligned;

/// Whether this CPU has the instructions (std caches the detection).
pub(super) fn available() -> bool {
    use std::arch::is_x86_feature_detected as has;
    has!("avx512f") && has!("avx512bw") && has!("avx512vl") && has!("avx512bf16")
}

/// Input features rounded up to whole tiles of AMX's (32, which is whole pairs): the length
/// of a row of pairs, in values, zero-padded.
pub(super) fn paired(k: usize) -> usize {
    k.next_multiple_of(32)
}

/// `weight` (`[outputs, inputs]`, as f32 values) rounded to bf16 and rearranged into
/// `[panels][paired(inputs)/2][PANEL][2]`, zero-padded to whole panels and tiles.
pub(super) fn pack_pairs(
    weight: impl Fn(usize) -> f32,
    inputs: usize,
    outputs: usize,
) -> Aligned<u16> {
    let kp = paired(inputs);
    let mut packed = Aligned::default();
    packed.resize(outputs.div_ceil(PANEL) * kp * PANEL);
    for o in 0..outputs {
        let panel = &mut packed[(o / PANEL) * kp * PANEL..][..kp * PANEL];
        for k in 0..inputs {
            let at = (k / 2) * 2 * PANEL + (o % PANEL) * 2 + k % 2;
            panel[at] = bf16::from_f32(weight(o * inputs + k)).to_bits();
        }
    }
    packed
}

/// Rounds rows `rows` of `x` (`k` values each) to bf16 into `out`, whose rows are
/// [`paired`]`(k)` values long, zeros past `k`.
///
/// # Safety
/// `x` holds `rows.end * k` values, `out` points to `rows.end * paired(k)` writable values,
/// no other thread writes these rows of it, and the CPU has AVX-512 BF16.
#[target_feature(enable = "avx512f,avx512bf16,avx512bw,avx512vl")]
pub(super) unsafe fn round_rows(x: &[f32], k: usize, rows: Range<usize>, out: *mut u16) {
    let kp = paired(k);
    for r in rows {
        let (src, dst) = (x[r * k..][..k].as_ptr(), out.wrapping_add(r * kp));
        let mut i = 0;
        while i < kp {
            let valid = k.saturating_sub(i).min(16);
            let load: __mmask16 = ((1u32 << valid) - 1) as u16;
            let store: __mmask16 = ((1u32 << (kp - i).min(16)) - 1) as u16;
            // SAFETY: the masks keep the load within the row's k values and the store within
            // its kp outputs (the caller's contract); masked-off lanes read as zero.
            unsafe {
                let v = _mm512_maskz_loadu_ps(load, src.add(i));
                let h: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(v));
                _mm256_mask_storeu_epi16(dst.add(i).cast(), store, h);
            }
            i += 16;
        }
    }
}

/// Computes the outputs of `panels` for every row, from inputs already rounded by
/// [`round_rows`].
///
/// # Safety
/// `x` holds `rows * paired(k)` values; `p` holds `[panels.end][paired(k)][PANEL]` values,
/// starting on a cache line, and `bias` `panels.end * PANEL`; `y` points to `rows * n`
/// writable values with `(panels.end - 1) * PANEL < n`. No other thread writes those
/// panels' columns of `y`. The CPU has AVX-512 BF16.
#[target_feature(enable = "avx512f,avx512bf16")]
pub(super) unsafe fn dense(
    x: &[u16],
    p: &[u16],
    bias: &[f32],
    y: *mut f32,
    s: Shape,
    panels: Range<usize>,
    act: Activation,
) {
    // SAFETY: forwarded contract; `Pairs` needs AVX-512 BF16, enabled here.
    unsafe { drive(Pairs { x, p }, bias, y, s, panels, act) }
}

/// Rounded input rows against panels of weight pairs.
#[derive(Clone, Copy)]
struct Pairs<'a> {
    x: &'a [u16],
    p: &'a [u16],
}

impl Tiles for Pairs<'_> {
    #[inline(always)]
    unsafe fn sums<const NR: usize, const NP: usize, const SPLIT: usize>(
        self,
        s: Shape,
        panel: usize,
        b: usize,
    ) -> [[[__m512; NP]; NR]; SPLIT] {
        let kp = paired(s.k);
        let pairs = kp / 2;
        // SAFETY (whole block): x is read below (b + NR) * kp and the panels below
        // (panel + NP) * kp * PANEL, within the caller's contract. A panel starts on a cache
        // line and a pair of its rows is 64 bytes, so every register load is aligned; an
        // input row is kp values (an even number) from an aligned start, so each pair is
        // 4-aligned.
        unsafe {
            let (xp, p) = (self.x.as_ptr(), self.p);
            let weights = |i: usize, q: usize| -> __m512bh {
                let at = p.as_ptr().add((panel + q) * kp * PANEL + i * 2 * PANEL);
                std::mem::transmute(_mm512_load_si512(at.cast()))
            };
            let input = |r: usize, i: usize| -> __m512bh {
                let pair = *xp.add((b + r) * kp + 2 * i).cast::<i32>();
                std::mem::transmute(_mm512_set1_epi32(pair))
            };
            let mut acc = [[[_mm512_setzero_ps(); NP]; NR]; SPLIT];
            let whole = pairs / SPLIT * SPLIT;
            let mut i = 0;
            while i < whole {
                for (u, acc) in acc.iter_mut().enumerate() {
                    let mut w = [weights(i + u, 0); NP];
                    for (q, w) in w.iter_mut().enumerate().skip(1) {
                        *w = weights(i + u, q);
                    }
                    for (r, acc) in acc.iter_mut().enumerate() {
                        let v = input(r, i + u);
                        for (acc, w) in acc.iter_mut().zip(&w) {
                            *acc = _mm512_dpbf16_ps(*acc, v, *w);
                        }
                    }
                }
                i += SPLIT;
            }
            while i < pairs {
                for (r, acc) in acc[0].iter_mut().enumerate() {
                    let v = input(r, i);
                    for (q, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm512_dpbf16_ps(*acc, v, weights(i, q));
                    }
                }
                i += 1;
            }
            acc
        }
    }
}
