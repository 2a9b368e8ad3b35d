//! f32 products from three bf16 products on AMX's tiles ("bf16x3"; cuBLAS emulates f32 on
//! bf16 tensor cores with the same kind of split, in three parts and nine products): each
//! operand is split into a bf16 high part and the bf16 rounding of what is left, `v ≈ hi + lo`, which keeps 16 of f32's 24 significant bits, and
//!
//! `x · w ≈ hi(x)·hi(w) + hi(x)·lo(w) + lo(x)·hi(w)`,
//!
//! dropping `lo(x)·lo(w)` and what the split leaves, each up to 2⁻¹⁶ of the product (an
//! operand's low part is up to 2⁻⁸ of it, and is rounded to 8 bits itself). A product is then
//! within about 2⁻¹⁴ of its f32 value,
//! where bf16 products are within 2⁻⁸; the sums stay f32. Values beyond bf16's largest finite
//! one (about 3.4e38, below f32's largest) and infinities give NaN, where f32 gives infinity.
//!
//! The three products are two on the tiles ([`super::amx`]): an input row is split into
//! `[lo(x), hi(x)]` and a panel's weights are `[hi(w); lo(w)]` along the shared dimension,
//! each part [`paired`] long. The first product, over both parts, gives `lo(x)·hi(w) +
//! hi(x)·lo(w)`; the second adds `hi(x)·hi(w)`. Split inputs and weights take as many bytes
//! as f32's.
//!
//! The tiles take 32 rows at a time, and below [`TILE_ROWS`] rows they are slower than f32's
//! kernel. Those batches run f32 products on the weights recombined in registers, `hi(w) +
//! lo(w)`, from the same panels, more accurate than the tiles, since the inputs stay f32.

use std::arch::x86_64::*;
use std::ops::Range;

use half::bf16;

use super::avx512::{Tiles, drive};
use super::bf16_products::{pack_pairs, paired};
use super::{PANEL, Shape};
use crate::Activation;
use crate::cpu::Aligned;

/// Rows from which the tiles run a layer. On MiniLM's layers, one core, the tiles run at
/// 0.5–0.8× f32's rate at 8 rows, 0.9–1.5× at 16 and 1.7–2.3× at 32; the recombined weights
/// at 0.8–0.9× (`encoder_bench::dense_kernel_choice_one_core`).
pub(super) const TILE_ROWS: usize = 16;

/// The length of a split row, and of a panel's shared dimension: two parts of
/// [`paired`]`(k)` values.
pub(super) fn width(k: usize) -> usize {
    2 * paired(k)
}

/// `v`'s high part (`v` rounded to bf16) and low part (what is left, rounded to bf16).
pub(super) fn split(v: f32) -> (bf16, bf16) {
    let hi = bf16::from_f32(v);
    (hi, bf16::from_f32(v - hi.to_f32()))
}

/// The weights (`value(o * inputs + k)`, `[outputs, inputs]`) split into `[hi(w); lo(w)]`
/// along the inputs and packed by pairs as the bf16 kernel takes them,
/// `[panels][width(inputs)/2][PANEL][2]`.
pub(super) fn pack(value: impl Fn(usize) -> f32, inputs: usize, outputs: usize) -> Aligned<u16> {
    let kp = paired(inputs);
    let part = |i: usize| {
        let (o, at) = (i / width(inputs), i % width(inputs));
        let (part, k) = (at / kp, at % kp);
        if k >= inputs {
            return 0.0;
        }
        let (hi, lo) = split(value(o * inputs + k));
        match part {
            1 => lo.to_f32(),
            _ => hi.to_f32(),
        }
    };
    // The parts are bf16 values already, so `pack_pairs`' rounding keeps them as they are.
    pack_pairs(part, width(inputs), outputs)
}

/// Splits rows `rows` of `x` (`k` values each) into `out`, whose rows are [`width`]`(k)`
/// values, `[lo(x), hi(x)]`, each part zero-padded to [`paired`]`(k)`.
///
/// # Safety
/// `x` holds `rows.end * k` values, `out` points to `rows.end * width(k)` writable values,
/// no other thread writes these rows of it, and the CPU has AVX-512 BF16.
#[target_feature(enable = "avx512f,avx512bf16,avx512bw,avx512vl")]
pub(super) unsafe fn split_rows(x: &[f32], k: usize, rows: Range<usize>, out: *mut u16) {
    let kp = paired(k);
    for r in rows {
        let (src, dst) = (x[r * k..][..k].as_ptr(), out.wrapping_add(r * width(k)));
        let mut i = 0;
        while i < kp {
            let load: __mmask16 = ((1u32 << k.saturating_sub(i).min(16)) - 1) as u16;
            // SAFETY: the mask keeps the load within the row's k values, and kp is a multiple
            // of 16, so the two stores stay within the row's width(k) outputs (the caller's
            // contract); masked-off lanes read as zero, and split into zeros.
            unsafe {
                let v = _mm512_maskz_loadu_ps(load, src.add(i));
                let hi: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(v));
                let widened = _mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(hi));
                let rest = _mm512_sub_ps(v, _mm512_castsi512_ps(widened));
                let lo: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(rest));
                _mm256_storeu_si256(dst.add(i).cast(), lo);
                _mm256_storeu_si256(dst.add(kp + i).cast(), hi);
            }
            i += 16;
        }
    }
}

/// f32 products of the rows of `x` with the recombined weights `hi(w) + lo(w)` of `panels`
/// (the few-row path: see the module's documentation).
///
/// # Safety
/// `x` holds `s.rows * s.k` values; `p` holds `[panels.end][width(k)][PANEL]` values from
/// [`pack`], starting on a cache line; `bias` `panels.end * PANEL`; `y` points to `s.rows *
/// s.n` writable values with `(panels.end - 1) * PANEL < s.n`. No other thread writes those
/// panels' columns of `y`. The CPU has AVX-512 F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn dense_few_rows(
    x: &[f32],
    p: &[u16],
    bias: &[f32],
    y: *mut f32,
    s: Shape,
    panels: Range<usize>,
    act: Activation,
) {
    // SAFETY: forwarded contract.
    unsafe { drive(Recombined { x, p }, bias, y, s, panels, act) }
}

/// f32 input rows against split panels, whose weights are recombined as they are loaded.
#[derive(Clone, Copy)]
struct Recombined<'a> {
    x: &'a [f32],
    p: &'a [u16],
}

impl Tiles for Recombined<'_> {
    #[inline(always)]
    unsafe fn sums<const NR: usize, const NP: usize, const SPLIT: usize>(
        self,
        s: Shape,
        panel: usize,
        b: usize,
    ) -> [[[__m512; NP]; NR]; SPLIT] {
        let (k, kp) = (s.k, paired(s.k));
        let pairs = k / 2;
        // SAFETY (whole block): x is read below (b + NR) * k (an odd k's last pair reads its
        // first value only) and the panels below (panel + NP) * 2 * kp * PANEL, within the
        // caller's contract. A panel starts on a cache line, a pair of its rows is 64 bytes
        // and a part (kp * PANEL values) a multiple of 1,024, so every register load is
        // aligned.
        unsafe {
            let (xp, p) = (self.x.as_ptr(), self.p.as_ptr());
            // A pair's 32-bit lane holds the even feature's bf16 in its low half and the odd
            // one's in its high half: each shifted or masked into place is that f32.
            let high = _mm512_set1_epi32(0xFFFF_0000u32 as i32);
            let weights = |i: usize, q: usize| -> (__m512, __m512) {
                let at = p.add((panel + q) * 2 * kp * PANEL + i * 2 * PANEL);
                let hi = _mm512_load_si512(at.cast());
                let lo = _mm512_load_si512(at.add(kp * PANEL).cast());
                let even = |v| _mm512_castsi512_ps(_mm512_slli_epi32::<16>(v));
                let odd = |v| _mm512_castsi512_ps(_mm512_and_si512(v, high));
                (
                    _mm512_add_ps(even(hi), even(lo)),
                    _mm512_add_ps(odd(hi), odd(lo)),
                )
            };
            let input = |r: usize, kk: usize| _mm512_set1_ps(*xp.add((b + r) * k + kk));
            let mut acc = [[[_mm512_setzero_ps(); NP]; NR]; SPLIT];
            let mut i = 0;
            while i < pairs {
                let u = i % SPLIT;
                let mut w = [weights(i, 0); NP];
                for (q, w) in w.iter_mut().enumerate().skip(1) {
                    *w = weights(i, q);
                }
                for (r, acc) in acc[u].iter_mut().enumerate() {
                    let (even, odd) = (input(r, 2 * i), input(r, 2 * i + 1));
                    for (acc, (we, wo)) in acc.iter_mut().zip(&w) {
                        *acc = _mm512_fmadd_ps(odd, *wo, _mm512_fmadd_ps(even, *we, *acc));
                    }
                }
                i += 1;
            }
            if k % 2 == 1 {
                for (r, acc) in acc[0].iter_mut().enumerate() {
                    let even = input(r, k - 1);
                    for (q, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm512_fmadd_ps(even, weights(pairs, q).0, *acc);
                    }
                }
            }
            acc
        }
    }
}

#[cfg(test)]
mod tests;
