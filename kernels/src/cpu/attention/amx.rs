//! Attention with bf16 products on AMX's tiles, for models served with them
//! ([`MatmulPrecision::Bf16`](crate::cpu::MatmulPrecision)) where the CPU has AMX: the
//! scores and the weighted sum of the values are [`Product`]s, the softmax between them
//! stays f32. As in PyTorch's bf16 attention, queries, keys, values and the probabilities
//! are rounded to bf16 and every product is summed in f32.
//!
//! Per unit (one head over one sequence of `len` tokens, `d` values a head):
//! - the keys are rounded into panels of 16 keys by pairs of features (`[lk/16][dk/2][16]
//!   [2]`, `lk` = len rounded up to 32, `dk` = d rounded up to 32) and the values into panels
//!   of 16 features by pairs of keys (`[d/16][lk/2][16][2]`), zeros past the real ones;
//! - each block of 32 queries is rounded (`[32][dk]`), scored against the key tiles its
//!   window reaches, in 32 × 32 products, into f32 scores (`[32][padded]`); the softmax
//!   turns a row into bf16 probabilities (`[32][padded]`) and its f32 sum; the
//!   probabilities times the value panels give the block's output (`[32][d]`), which is
//!   divided by the sums into ctx.
//!
//! A block of fewer than 32 queries leaves the last rows of its buffers as they were (an
//! earlier block's, unit's or call's values, whatever their bits): a row of a product
//! depends on that row of its input alone, and those rows are never written to ctx.

use std::arch::x86_64::*;
use std::ops::Range;

use super::{Call, Unit, add_bias};
use crate::cpu::AlignedVec;
use crate::cpu::amx::{self, Product, Tiles};

/// Queries a block: one product's rows.
const ROWS: usize = amx::ROWS;
/// Keys a score product covers, and a step of the weighted sum.
const KEYS: usize = 2 * amx::PANEL;

/// Heads this wide at most: a key's rounded values are staged on the stack.
const MAX_HEAD: usize = 256;

/// Whether this CPU runs this kernel, for heads of `d` values: the value panels are 16
/// features wide. The rounding takes AVX-512 BF16 (which every CPU with AMX has).
pub(super) fn available(d: usize) -> bool {
    use std::arch::is_x86_feature_detected as has;
    amx::available()
        && has!("avx512f")
        && has!("avx512bw")
        && has!("avx512bf16")
        && d.is_multiple_of(amx::PANEL)
        && d <= MAX_HEAD
}

/// The row stride of the scores and probabilities for sequences of up to `longest` tokens:
/// whole products of keys, and an odd number of 16-value runs, which keeps the stride off
/// the powers of two that would map a column of them onto a few cache sets.
pub(super) fn padded(longest: usize) -> usize {
    longest.next_multiple_of(KEYS) + amx::PANEL
}

/// f32s of scratch one piece needs, heads of `d` values and scores `padded` wide.
pub(super) fn piece_len(d: usize, padded: usize) -> usize {
    let dk = d.next_multiple_of(amx::STEP);
    // Keys, values and the block's queries and probabilities are bf16: two a float.
    (padded * dk + padded * d + ROWS * dk + ROWS * padded) / 2 + ROWS * padded + ROWS * d
}

/// This thread's tiles, configured for [`run_unit`] until dropped.
///
/// # Safety
/// [`available`] is true; the holder runs no other work on this thread meanwhile.
pub(super) unsafe fn configure() -> Tiles {
    // SAFETY: the contract.
    unsafe { Tiles::configure() }
}

/// Where token `t`'s query (`part` 0), key (1) or value (2) for the unit's head starts in
/// `qkv`, which this kernel reads in place (`Kernels::reads_in_place`): `[tokens][3][hidden]`.
fn at(call: Call<'_>, part: usize, unit: Unit, t: usize) -> *const f32 {
    let h = call.shape.hidden;
    let d = call.shape.head_dim();
    call.heads
        .as_ptr()
        .wrapping_add((unit.start + t) * 3 * h + part * h + unit.head * d)
}

/// The unit's buffers, carved from a piece's scratch; every start is on a cache line.
struct Buffers {
    keys: *mut u16,
    values: *mut u16,
    queries: *mut u16,
    probs: *mut u16,
    scores: *mut f32,
    out: *mut f32,
}

impl Buffers {
    fn carve(buffer: &mut AlignedVec, d: usize, padded: usize) -> Buffers {
        let dk = d.next_multiple_of(amx::STEP);
        let base = buffer.as_mut_ptr();
        // Every size is a multiple of 16 floats (padded and dk are of 16 and 32), so each
        // part starts on a cache line; together they are `piece_len`, which the caller
        // holds.
        let keys = base;
        let values = keys.wrapping_add(padded * dk / 2);
        let queries = values.wrapping_add(padded * d / 2);
        let probs = queries.wrapping_add(ROWS * dk / 2);
        let scores = probs.wrapping_add(ROWS * padded / 2);
        let out = scores.wrapping_add(ROWS * padded);
        Buffers {
            keys: keys.cast(),
            values: values.cast(),
            queries: queries.cast(),
            probs: probs.cast(),
            scores,
            out,
        }
    }
}

/// Attention of one head over one sequence.
///
/// # Safety
/// As `super::run_unit`, with `buffer` holding [`piece_len`] values for the call's padded
/// width, [`available`] true for the call's heads, and the tiles [configured](configure)
/// on this thread.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
pub(super) unsafe fn run_unit(call: Call<'_>, unit: Unit, buffer: &mut AlignedVec) {
    let d = call.shape.head_dim();
    let b = Buffers::carve(buffer, d, call.padded);
    // SAFETY (both): the buffers hold panels for up to `padded` keys (the contract).
    unsafe {
        pack_keys(call, unit, b.keys);
        pack_values(call, unit, b.values);
    }
    let mut q = 0;
    while q < unit.len {
        let rows = q..(q + ROWS).min(unit.len);
        // SAFETY: the rows belong to the unit; the rest is the caller's contract.
        unsafe { query_block(call, unit, rows, &b) };
        q += ROWS;
    }
}

/// One block of up to 32 queries: scores, softmax, weighted values, into ctx.
///
/// # Safety
/// As [`run_unit`], whose panels are packed.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn query_block(call: Call<'_>, unit: Unit, rows: Range<usize>, b: &Buffers) {
    let (d, p) = (call.shape.head_dim(), call.padded);
    let dk = d.next_multiple_of(amx::STEP);
    let lk = unit.len.next_multiple_of(KEYS);
    let reach = call.keys(&rows, unit.len);
    let keys = reach.start / KEYS * KEYS..reach.end.next_multiple_of(KEYS);
    let live = keys.start..keys.end.min(unit.len);
    // SAFETY (whole block): queries, keys and scores lie within the buffers for `padded`
    // keys; the unit's rows and this head's columns of ctx are its own to write.
    unsafe {
        round_queries(call, unit, rows.clone(), b.queries, dk);
        for j in keys.clone().step_by(KEYS) {
            let score = Product {
                a: b.queries,
                lda: dk,
                b: b.keys.add(j * dk),
                panel: amx::PANEL * dk,
                steps: dk / amx::STEP,
                c: b.scores.add(j),
                ldc: p,
                accumulate: false,
            };
            score.two_panels();
        }
        let mut sums = [0f32; ROWS];
        let mut scale = call.scale;
        if call.bias.is_some() || call.window.is_some() {
            scale_scores(b.scores, p, rows.len(), live.clone(), call.scale);
            let scores = std::slice::from_raw_parts_mut(b.scores, ROWS * p);
            add_bias(call, unit, rows.clone(), live.clone(), scores);
            scale = 1.0;
        }
        for (r, sum) in sums.iter_mut().enumerate().take(rows.len()) {
            let row = std::slice::from_raw_parts(b.scores.add(r * p + live.start), live.len());
            *sum = softmax_to_bf16(row, scale, b.probs.add(r * p + keys.start), keys.len());
        }
        let mut c = 0;
        while c < d {
            let weigh = Product {
                a: b.probs.add(keys.start),
                lda: p,
                b: b.values.add(c * lk + keys.start * amx::PANEL),
                panel: amx::PANEL * lk,
                steps: keys.len() / amx::STEP,
                c: b.out.add(c),
                ldc: d,
                accumulate: false,
            };
            match d - c >= KEYS {
                true => weigh.two_panels(),
                false => weigh.one_panel(),
            }
            c += KEYS;
        }
        write_ctx(call, unit, rows, &sums, b.out);
    }
}

/// `keys[j / 16][c / 2][j % 16][c % 2]` = key `j`'s value `c`, rounded to bf16, for `j` below
/// the unit's length rounded up to 32 and `c` below d rounded up to 32; zeros past the real
/// ones.
///
/// # Safety
/// `keys` holds that many values; the unit lies in the call's input.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn pack_keys(call: Call<'_>, unit: Unit, keys: *mut u16) {
    let d = call.shape.head_dim();
    let pairs = d.next_multiple_of(amx::STEP) / 2;
    let lk = unit.len.next_multiple_of(KEYS);
    // A panel's 16 keys for one pair of features are 16 consecutive 32-bit words.
    let words = keys.cast::<u32>();
    // SAFETY (whole block): rows j < len of the unit's keys lie in the input; the words
    // written are below lk · pairs, within `keys`.
    unsafe {
        std::ptr::write_bytes(words, 0, lk * pairs);
        let mut row = [0u32; MAX_HEAD / 2];
        for j in 0..unit.len {
            round_pairs(at(call, 1, unit, j), d, row.as_mut_ptr());
            let panel = words.add((j / amx::PANEL) * amx::PANEL * pairs + j % amx::PANEL);
            for (i, word) in row.iter().enumerate().take(d / 2) {
                *panel.add(i * amx::PANEL) = *word;
            }
        }
    }
}

/// `values[c / 16][j / 2][c % 16][j % 2]` = key `j`'s value `c`, rounded to bf16, for `j`
/// below the unit's length rounded up to 32; zeros past it.
///
/// # Safety
/// `values` holds `d` times that many values; the unit lies in the call's input.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn pack_values(call: Call<'_>, unit: Unit, values: *mut u16) {
    let d = call.shape.head_dim();
    let lk = unit.len.next_multiple_of(KEYS);
    // Lane 2i takes value i of the first row, lane 2i + 1 value i of the second, from
    // `cvtne2ps`'s halves (the first row below, the second above).
    let interleave = _mm512_set_epi16(
        31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8, 23, 7, 22, 6, 21, 5, 20, 4,
        19, 3, 18, 2, 17, 1, 16, 0,
    );
    // SAFETY (whole block): rows below len lie in the input (others read as zeros); each
    // store writes 32 values of panel c / 16 below lk · 16, within `values`.
    unsafe {
        let row = |j: usize, c: usize| match j < unit.len {
            true => _mm512_loadu_ps(at(call, 2, unit, j).add(c)),
            false => _mm512_setzero_ps(),
        };
        for c in (0..d).step_by(amx::PANEL) {
            let panel = values.add(c * lk);
            for j in (0..lk).step_by(2) {
                let both: __m512i =
                    std::mem::transmute(_mm512_cvtne2ps_pbh(row(j + 1, c), row(j, c)));
                let pairs = _mm512_permutexvar_epi16(interleave, both);
                _mm512_storeu_si512(panel.add(j * amx::PANEL).cast(), pairs);
            }
        }
    }
}

/// The block's queries rounded into `[32][dk]`, zeros past d; rows past the block keep
/// what they held.
///
/// # Safety
/// `queries` holds 32 · dk values; the rows belong to the unit.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn round_queries(
    call: Call<'_>,
    unit: Unit,
    rows: Range<usize>,
    queries: *mut u16,
    dk: usize,
) {
    let d = call.shape.head_dim();
    // SAFETY: the rows lie in the input; each writes dk values of its row of `queries`.
    unsafe {
        for (r, t) in rows.enumerate() {
            let out = queries.add(r * dk);
            std::ptr::write_bytes(out.add(d), 0, dk - d);
            round_pairs(at(call, 0, unit, t), d, out.cast());
        }
    }
}

/// `d` f32s (a multiple of 16) rounded to bf16 at `out`.
///
/// # Safety
/// `x` holds d values and `out` room for d bf16s (d / 2 words).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn round_pairs(x: *const f32, d: usize, out: *mut u32) {
    for c in (0..d).step_by(16) {
        // SAFETY: the contract.
        unsafe {
            let h: __m256i = std::mem::transmute(_mm512_cvtneps_pbh(_mm512_loadu_ps(x.add(c))));
            _mm256_storeu_si256(out.add(c / 2).cast(), h);
        }
    }
}

/// Multiplies the scores `keys` of the first `rows` rows by `scale`.
///
/// # Safety
/// `scores` holds `rows` rows `p` apart, each at least `keys.end` long.
unsafe fn scale_scores(scores: *mut f32, p: usize, rows: usize, keys: Range<usize>, scale: f32) {
    for r in 0..rows {
        // SAFETY: the contract.
        let row =
            unsafe { std::slice::from_raw_parts_mut(scores.add(r * p + keys.start), keys.len()) };
        row.iter_mut().for_each(|s| *s *= scale);
    }
}

/// `out[i] = exp(scale · (row[i] − max(row)))` rounded to bf16 ([`exp2`]'s), and zeros from `row.len()`
/// to `width` (a multiple of 32); returns the sum of the unrounded values.
///
/// # Safety
/// `out` has room for `width` values, at least `row.len()`.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn softmax_to_bf16(row: &[f32], scale: f32, out: *mut u16, width: usize) -> f32 {
    let n = row.len();
    let lanes = |i: usize| -> __mmask16 {
        match n.saturating_sub(i).min(16) {
            16 => 0xFFFF,
            k => ((1u32 << k) - 1) as __mmask16,
        }
    };
    let p = row.as_ptr();
    // SAFETY (whole block): the masks keep every load below n; the stores write 32 values
    // from i < width.
    unsafe {
        let neg = _mm512_set1_ps(f32::NEG_INFINITY);
        let mut m = neg;
        for i in (0..n).step_by(16) {
            m = _mm512_max_ps(m, _mm512_mask_loadu_ps(neg, lanes(i), p.add(i)));
        }
        // e^(scale · (x − max)) = 2^(x · k − max · k).
        let k = scale * std::f32::consts::LOG2_E;
        let (kv, mk) = (
            _mm512_set1_ps(k),
            _mm512_set1_ps(_mm512_reduce_max_ps(m) * k),
        );
        let weight = |i: usize| {
            let x = _mm512_maskz_loadu_ps(lanes(i), p.add(i));
            _mm512_maskz_mov_ps(lanes(i), exp2(_mm512_fmsub_ps(x, kv, mk)))
        };
        let mut sum = _mm512_setzero_ps();
        for i in (0..width).step_by(KEYS) {
            let (low, high) = (weight(i), weight(i + 16));
            sum = _mm512_add_ps(sum, _mm512_add_ps(low, high));
            let both: __m512i = std::mem::transmute(_mm512_cvtne2ps_pbh(high, low));
            _mm512_storeu_si512(out.add(i).cast(), both);
        }
        _mm512_reduce_add_ps(sum)
    }
}

/// 2^y per lane for y ≤ 0, within 2.6e-6 of itself: 2^round(y) times a degree-4 fit of 2^f
/// on [−½, ½]. The probabilities are rounded to bf16 (8 significant bits) after it, so the
/// five-term polynomial and two-part range reduction of f32's `exp` would add nothing but
/// work, and the softmax is most of this kernel's. Below −125 (a key outside a window is −∞)
/// the result is exactly 0, never a subnormal, which would slow every sum it entered; a
/// weight that small changes no sum of weights of which the largest is 1. NaN stays NaN.
#[inline]
#[target_feature(enable = "avx512f")]
fn exp2(y: __m512) -> __m512 {
    const FIT: [f32; 5] = [
        0.999_999_3,
        0.693_121_8,
        0.240_247_44,
        0.055_917_86,
        0.009_570_101,
    ];
    // From −125 the fit's 2^round(y) · p(f) is a normal value (p(f) ≥ 0.7 > ½).
    let low = _mm512_set1_ps(-125.0);
    // Lanes at least −125, or NaN (unordered), keep their value; the rest give 0.
    let kept = _mm512_cmp_ps_mask::<_CMP_NLT_UQ>(y, low);
    let y = _mm512_max_ps(low, y);
    let n = _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(y);
    let f = _mm512_sub_ps(y, n);
    let c = |i: usize| _mm512_set1_ps(FIT[i]);
    let p = _mm512_fmadd_ps(c(4), f, c(3));
    let p = _mm512_fmadd_ps(p, f, c(2));
    let p = _mm512_fmadd_ps(p, f, c(1));
    let p = _mm512_fmadd_ps(p, f, c(0));
    _mm512_maskz_scalef_ps(kept, p, n)
}

/// ctx's rows `rows` of the unit, this head's columns: the block's output rows divided by
/// their sums.
///
/// # Safety
/// `out` holds the block's rows, d apart; the unit's rows of ctx are its own to write.
#[target_feature(enable = "avx512f")]
unsafe fn write_ctx(
    call: Call<'_>,
    unit: Unit,
    rows: Range<usize>,
    sums: &[f32; ROWS],
    out: *const f32,
) {
    let (h, d) = (call.shape.hidden, call.shape.head_dim());
    for (r, i) in rows.enumerate() {
        // SAFETY: row r of the block's output and row i of the unit in ctx, d values each
        // (a multiple of 16).
        unsafe {
            let inv = _mm512_set1_ps(1.0 / sums[r]);
            let dst = call.ctx.0.add((unit.start + i) * h + unit.head * d);
            for c in (0..d).step_by(16) {
                let v = _mm512_loadu_ps(out.add(r * d + c));
                _mm512_storeu_ps(dst.add(c), _mm512_mul_ps(v, inv));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::arch::x86_64::*;

    /// 2^y within 2.6e-6 down to −125; exactly 0 below it and at −∞ (never a subnormal);
    /// NaN stays NaN.
    #[test]
    fn exp2_is_close_zero_below_the_normals_and_keeps_nan() {
        use std::arch::is_x86_feature_detected as has;
        if !has!("avx512f") {
            crate::cuda::report_skip(
                "exp2_is_close_zero_below_the_normals_and_keeps_nan",
                "no AVX-512",
            );
            return;
        }
        let mut ys: Vec<f32> = (0..=12_500).map(|i| -(i as f32) / 100.0).collect();
        ys.extend([
            -125.01,
            -126.0,
            -127.0,
            -150.0,
            -1e30,
            f32::NEG_INFINITY,
            f32::NAN,
        ]);
        for chunk in ys.chunks(16) {
            let mut lanes = [0f32; 16];
            lanes[..chunk.len()].copy_from_slice(chunk);
            let mut out = [0f32; 16];
            // SAFETY: AVX-512 F is present (checked above); the arrays hold 16 lanes.
            unsafe {
                _mm512_storeu_ps(
                    out.as_mut_ptr(),
                    super::exp2(_mm512_loadu_ps(lanes.as_ptr())),
                )
            };
            for (y, got) in chunk.iter().zip(out) {
                if y.is_nan() {
                    assert!(got.is_nan());
                } else if *y < -125.0 {
                    assert_eq!(got.to_bits(), 0, "2^{y} = {got}");
                } else {
                    let want = (*y as f64).exp2();
                    assert!(got.is_normal(), "2^{y} = {got}");
                    assert!(
                        ((got as f64 - want) / want).abs() < 2.7e-6,
                        "2^{y} = {got}, want {want}"
                    );
                }
            }
        }
    }
}
