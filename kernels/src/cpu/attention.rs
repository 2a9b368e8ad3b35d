//! Multi-head self-attention over sequences packed end to end, each on its own length: no
//! padding, no mask. `ctx = softmax(Q Kᵀ / √d) V` for every (sequence, head).
//!
//! The input is the output of the fused query/key/value product, `[tokens, 3 · hidden]`:
//! queries in columns `0..hidden`, keys in `hidden..2·hidden`, values after them, head `h`
//! at `h·d..(h+1)·d` within each. The work is cut into (sequence, head) units, which write
//! disjoint parts of `ctx`, and the units into pieces of about equal cost (attention grows
//! with the square of a sequence's length) that the rayon pool's threads take as they come
//! free.
//!
//! Per unit, the keys are first copied transposed (`[d][length]`), so that a block of
//! scores is a register-tiled product like the dense layers' (6 queries × 16 keys, twelve
//! accumulators, no horizontal sums); then each row of the block goes through the softmax
//! (exponentials from [`super::vmath`]); then the probabilities multiply the values, read
//! in place (a head's values for one token are `d` contiguous floats), and the row is
//! divided by its sum at the end. A block of [`QUERY_BLOCK`] queries keeps its scores in L1
//! or L2, whatever the length.

use std::ops::Range;

use super::AlignedVec;
use super::vmath::{self, has_avx2_fma};
use crate::KernelError;

/// Queries whose scores are computed, normalised and applied together.
const QUERY_BLOCK: usize = 24;
/// Keys per score tile; the transposed keys are padded to a multiple of it.
const KEY_TILE: usize = 16;
/// Pieces per thread, so that a thread the scheduler preempts does not hold the others up.
const PIECES_PER_THREAD: usize = 4;
/// Below this many multiply-adds in all, the call runs on one thread.
const PARALLEL_MIN_MACS: usize = 256 * 1024;

/// The heads and the width they split.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AttentionShape {
    pub hidden: usize,
    pub heads: usize,
}

impl AttentionShape {
    pub fn head_dim(&self) -> usize {
        self.hidden / self.heads
    }
}

/// Buffers reused across calls: per piece, the transposed keys and a block of scores; and
/// the pieces themselves. Grown to the largest batch seen, never shrunk.
#[derive(Default)]
pub struct AttentionScratch {
    buffers: Vec<AlignedVec>,
    pieces: Vec<Range<usize>>,
}

/// One unit: sequence `tokens` of the batch, head `head`.
#[derive(Clone, Copy)]
struct Unit {
    start: usize,
    len: usize,
    head: usize,
}

/// What every unit of a call shares.
#[derive(Clone, Copy)]
struct Call<'a> {
    qkv: &'a [f32],
    shape: AttentionShape,
    /// `ctx`, `[tokens, hidden]`; units write disjoint rows × columns.
    ctx: CtxPtr,
    scale: f32,
    /// Keys, padded to [`KEY_TILE`], in the longest sequence.
    padded: usize,
    /// Whether the AVX2 kernels run (the CPU has them and d is a multiple of 8).
    simd: bool,
}

/// The output shared by the threads of one call.
#[derive(Clone, Copy)]
struct CtxPtr(*mut f32);
// SAFETY: the units of a call write disjoint parts of ctx (see `Call`), and the call returns
// only after every unit has run, before the borrow of ctx ends.
unsafe impl Send for CtxPtr {}
// SAFETY: as for Send.
unsafe impl Sync for CtxPtr {}

/// `ctx[tokens, hidden]` = the attention of every sequence (tokens `offsets[i]..offsets[i+1]`)
/// over itself, from `qkv[tokens, 3·hidden]`, on up to `threads` threads of the current rayon
/// pool.
pub fn attention(
    qkv: &[f32],
    offsets: &[usize],
    shape: AttentionShape,
    ctx: &mut [f32],
    scratch: &mut AttentionScratch,
    threads: usize,
) -> Result<(), KernelError> {
    let simd = has_avx2_fma() && shape.head_dim().is_multiple_of(8);
    attention_with(qkv, offsets, shape, ctx, scratch, threads, simd)
}

/// [`attention`], on the AVX2 kernels or not.
fn attention_with(
    qkv: &[f32],
    offsets: &[usize],
    shape: AttentionShape,
    ctx: &mut [f32],
    scratch: &mut AttentionScratch,
    threads: usize,
    simd: bool,
) -> Result<(), KernelError> {
    check(qkv, offsets, shape, ctx)?;
    let longest = offsets.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
    if longest == 0 {
        return Ok(());
    }
    let d = shape.head_dim();
    let padded = longest.div_ceil(KEY_TILE) * KEY_TILE;
    let macs: usize = offsets
        .windows(2)
        .map(|w| (w[1] - w[0]).pow(2))
        .sum::<usize>()
        * 2
        * shape.hidden;
    let pieces = if macs < PARALLEL_MIN_MACS {
        1
    } else {
        threads.max(1) * PIECES_PER_THREAD
    };
    split(offsets, shape.heads, pieces, &mut scratch.pieces);
    let per_piece = d * padded + QUERY_BLOCK * padded;
    if scratch.buffers.len() < scratch.pieces.len() {
        scratch
            .buffers
            .resize_with(scratch.pieces.len(), AlignedVec::default);
    }
    let call = Call {
        qkv,
        shape,
        ctx: CtxPtr(ctx.as_mut_ptr()),
        scale: 1.0 / (d as f32).sqrt(),
        padded,
        simd,
    };
    let run = |range: Range<usize>, buffer: &mut AlignedVec| {
        if buffer.len() < per_piece {
            buffer.resize(per_piece);
        }
        for u in range {
            let (seq, head) = (u / shape.heads, u % shape.heads);
            let unit = Unit {
                start: offsets[seq],
                len: offsets[seq + 1] - offsets[seq],
                head,
            };
            // SAFETY: `check` bounded every sequence inside qkv and ctx; this unit writes
            // only its sequence's rows and its head's columns of ctx, which no other unit
            // writes; the buffer holds d·padded + QUERY_BLOCK·padded values.
            unsafe { run_unit(call, unit, buffer) };
        }
    };
    let (first, rest) = scratch.pieces.split_first().expect("at least one piece");
    let (first_buffer, rest_buffers) = scratch.buffers.split_first_mut().expect("sized above");
    rayon::scope(|s| {
        for (range, buffer) in rest.iter().zip(rest_buffers) {
            let run = &run;
            s.spawn(move |_| run(range.clone(), buffer));
        }
        run(first.clone(), first_buffer);
    });
    Ok(())
}

fn check(
    qkv: &[f32],
    offsets: &[usize],
    shape: AttentionShape,
    ctx: &[f32],
) -> Result<(), KernelError> {
    let fail = |detail: String| {
        Err(KernelError::Shape {
            op: "cpu::attention",
            detail,
        })
    };
    if shape.heads == 0 || shape.hidden == 0 || !shape.hidden.is_multiple_of(shape.heads) {
        return fail(format!(
            "{} heads cannot split {} values",
            shape.heads, shape.hidden
        ));
    }
    let tokens = *offsets.last().unwrap_or(&0);
    if offsets.first() != Some(&0) || offsets.windows(2).any(|w| w[1] < w[0]) {
        return fail("offsets must start at 0 and never decrease".into());
    }
    if qkv.len() != tokens * 3 * shape.hidden || ctx.len() != tokens * shape.hidden {
        return fail(format!(
            "{tokens} tokens need {} qkv and {} ctx values, got {} and {}",
            tokens * 3 * shape.hidden,
            tokens * shape.hidden,
            qkv.len(),
            ctx.len()
        ));
    }
    Ok(())
}

/// Cuts the units (sequence-major, then head) into at most `pieces` contiguous ranges of
/// about equal cost, into `out`.
fn split(offsets: &[usize], heads: usize, pieces: usize, out: &mut Vec<Range<usize>>) {
    out.clear();
    let cost = |u: usize| {
        let seq = u / heads;
        let len = offsets[seq + 1] - offsets[seq];
        len * (len + KEY_TILE)
    };
    let units = (offsets.len() - 1) * heads;
    let total: usize = (0..units).map(cost).sum();
    let pieces = pieces.clamp(1, units.max(1));
    let mut start = 0;
    let mut done = 0;
    for u in 0..units {
        done += cost(u);
        let cut = total * (out.len() + 1) / pieces;
        if done >= cut && out.len() + 1 < pieces {
            out.push(start..u + 1);
            start = u + 1;
        }
    }
    out.push(start..units);
}

/// Attention of one head over one sequence.
///
/// # Safety
/// The sequence lies inside `qkv` and `ctx`; no other thread writes this unit's part of
/// `ctx`; `buffer` holds at least `d·padded + QUERY_BLOCK·padded` values.
unsafe fn run_unit(call: Call<'_>, unit: Unit, buffer: &mut AlignedVec) {
    let d = call.shape.head_dim();
    let (keys, scores) = buffer.split_at_mut(d * call.padded);
    transpose_keys(call, unit, keys);
    let mut q = 0;
    while q < unit.len {
        let rows = QUERY_BLOCK.min(unit.len - q);
        // SAFETY: forwarded contract; rows q..q+rows belong to this unit.
        unsafe { query_block(call, unit, q..q + rows, keys, scores) };
        q += rows;
    }
}

/// `keys[c · padded + j]` = key `j`'s value `c` for this head; zeros past the sequence.
fn transpose_keys(call: Call<'_>, unit: Unit, keys: &mut [f32]) {
    let (h, d, p) = (call.shape.hidden, call.shape.head_dim(), call.padded);
    let stride = 3 * h;
    let base = unit.start * stride + h + unit.head * d;
    for j in 0..unit.len {
        let key = &call.qkv[base + j * stride..][..d];
        for (c, v) in key.iter().enumerate() {
            keys[c * p + j] = *v;
        }
    }
    let tile_end = unit.len.div_ceil(KEY_TILE) * KEY_TILE;
    for c in 0..d {
        keys[c * p + unit.len..c * p + tile_end].fill(0.0);
    }
}

/// Scores, softmax and the weighted values for the queries `rows` of a unit.
///
/// # Safety
/// As [`run_unit`].
unsafe fn query_block(
    call: Call<'_>,
    unit: Unit,
    rows: Range<usize>,
    keys: &[f32],
    scores: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if call.simd {
        // SAFETY: AVX2 and FMA are present and d is a multiple of 8 (`simd` says so); the
        // rest is the caller's contract.
        unsafe {
            avx2::scores(call, unit, rows.clone(), keys, scores);
            avx2::softmax_values(call, unit, rows, scores);
        }
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { portable::query_block(call, unit, rows, keys, scores) }
}

/// Index of value `c` of token `t`'s query (`part` 0), key (1) or value (2) for a head.
#[inline(always)]
fn at(call: &Call<'_>, t: usize, part: usize, head: usize, c: usize) -> usize {
    let h = call.shape.hidden;
    t * 3 * h + part * h + head * call.shape.head_dim() + c
}

mod portable {
    use std::ops::Range;

    use super::{Call, Unit, at, vmath};

    /// # Safety
    /// As [`super::run_unit`].
    pub(super) unsafe fn query_block(
        call: Call<'_>,
        unit: Unit,
        rows: Range<usize>,
        keys: &[f32],
        scores: &mut [f32],
    ) {
        let (d, p, n) = (call.shape.head_dim(), call.padded, unit.len);
        for (r, i) in rows.enumerate() {
            let row = &mut scores[r * p..r * p + n];
            let q = &call.qkv[at(&call, unit.start + i, 0, unit.head, 0)..][..d];
            for (j, s) in row.iter_mut().enumerate() {
                *s = q
                    .iter()
                    .enumerate()
                    .map(|(c, qc)| qc * keys[c * p + j])
                    .sum::<f32>()
                    * call.scale;
            }
            let max = row.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v));
            let mut sum = 0.0;
            for s in row.iter_mut() {
                *s = vmath::exp(*s - max);
                sum += *s;
            }
            let inv = 1.0 / sum;
            let out = unit.start + i;
            for c in 0..d {
                let mut acc = 0.0;
                for (j, pj) in row.iter().enumerate() {
                    acc += pj * call.qkv[at(&call, unit.start + j, 2, unit.head, c)];
                }
                let h = call.shape.hidden;
                // SAFETY: row `out` and column head·d + c lie in this unit's part of ctx.
                unsafe { *call.ctx.0.add(out * h + unit.head * d + c) = acc * inv };
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;
    use std::ops::Range;

    use super::{Call, KEY_TILE, Unit, at};
    use crate::cpu::vmath;
    use crate::cpu::vmath::avx2::{exp, hmax, hsum};

    /// `scores[r][j] = scale · q(rows.start + r) · k(j)` for every key tile.
    ///
    /// # Safety
    /// AVX2 and FMA are present; d is a multiple of 8; as [`super::run_unit`] otherwise.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn scores(
        call: Call<'_>,
        unit: Unit,
        rows: Range<usize>,
        keys: &[f32],
        scores: &mut [f32],
    ) {
        let tiles = unit.len.div_ceil(KEY_TILE);
        for tile in 0..tiles {
            let mut r = rows.start;
            while r < rows.end {
                let left = rows.end - r;
                // SAFETY: rows r.. r+n lie in the block; the tile lies in the padded keys.
                unsafe {
                    match left {
                        1 => score_tile::<1>(call, unit, r, rows.start, tile, keys, scores),
                        2 => score_tile::<2>(call, unit, r, rows.start, tile, keys, scores),
                        3 => score_tile::<3>(call, unit, r, rows.start, tile, keys, scores),
                        4 => score_tile::<4>(call, unit, r, rows.start, tile, keys, scores),
                        5 => score_tile::<5>(call, unit, r, rows.start, tile, keys, scores),
                        _ => score_tile::<6>(call, unit, r, rows.start, tile, keys, scores),
                    }
                }
                r += left.min(6);
            }
        }
    }

    #[inline(always)]
    unsafe fn score_tile<const R: usize>(
        call: Call<'_>,
        unit: Unit,
        row: usize,
        first: usize,
        tile: usize,
        keys: &[f32],
        scores: &mut [f32],
    ) {
        let (d, p) = (call.shape.head_dim(), call.padded);
        let j = tile * KEY_TILE;
        // SAFETY (whole block): queries row..row+R of this unit and values c < d lie in
        // qkv; keys[c·p + j .. + 16] lie in the padded transposed keys (j + 16 <= p);
        // the scores rows (row - first) < QUERY_BLOCK are p wide.
        unsafe {
            let q = call
                .qkv
                .as_ptr()
                .add(at(&call, unit.start + row, 0, unit.head, 0));
            let q_stride = 3 * call.shape.hidden;
            let k = keys.as_ptr().add(j);
            let mut acc = [[_mm256_setzero_ps(); 2]; R];
            for c in 0..d {
                let k0 = _mm256_load_ps(k.add(c * p));
                let k1 = _mm256_load_ps(k.add(c * p + 8));
                for (r, acc) in acc.iter_mut().enumerate() {
                    let qv = _mm256_broadcast_ss(&*q.add(r * q_stride + c));
                    acc[0] = _mm256_fmadd_ps(qv, k0, acc[0]);
                    acc[1] = _mm256_fmadd_ps(qv, k1, acc[1]);
                }
            }
            let scale = _mm256_set1_ps(call.scale);
            for (r, acc) in acc.iter().enumerate() {
                let s = scores.as_mut_ptr().add((row - first + r) * p + j);
                _mm256_store_ps(s, _mm256_mul_ps(acc[0], scale));
                _mm256_store_ps(s.add(8), _mm256_mul_ps(acc[1], scale));
            }
        }
    }

    /// Turns each row of scores into probabilities (unnormalised), multiplies them into the
    /// values and writes the rows of ctx divided by their sums.
    ///
    /// # Safety
    /// As [`scores`].
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn softmax_values(
        call: Call<'_>,
        unit: Unit,
        rows: Range<usize>,
        scores: &mut [f32],
    ) {
        let p = call.padded;
        let mut sums = [0f32; super::QUERY_BLOCK];
        for r in 0..rows.len() {
            // SAFETY: the row holds p >= unit.len scores.
            sums[r] = unsafe { softmax_row(&mut scores[r * p..r * p + unit.len]) };
        }
        let d = call.shape.head_dim();
        let mut c = 0;
        while c < d {
            let width = (d - c).min(32) / 8;
            let mut r = 0;
            while r < rows.len() {
                let n = (rows.len() - r).min(3);
                // SAFETY: rows and columns within the unit, as above.
                unsafe {
                    match (n, width) {
                        (3, 4) => pv_tile::<3, 4>(call, unit, rows.start, r, c, scores, &sums),
                        (2, 4) => pv_tile::<2, 4>(call, unit, rows.start, r, c, scores, &sums),
                        (1, 4) => pv_tile::<1, 4>(call, unit, rows.start, r, c, scores, &sums),
                        (3, _) => pv_tile::<3, 1>(call, unit, rows.start, r, c, scores, &sums),
                        (2, _) => pv_tile::<2, 1>(call, unit, rows.start, r, c, scores, &sums),
                        _ => pv_tile::<1, 1>(call, unit, rows.start, r, c, scores, &sums),
                    }
                }
                r += n;
            }
            c += if width == 4 { 32 } else { 8 };
        }
    }

    /// `row = exp(row - max(row))`; returns the sum.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn softmax_row(row: &mut [f32]) -> f32 {
        let n = row.len();
        let whole = n / 8 * 8;
        let p = row.as_mut_ptr();
        // SAFETY (whole block): offsets below `whole` <= n.
        unsafe {
            let mut m = _mm256_set1_ps(f32::NEG_INFINITY);
            for i in (0..whole).step_by(8) {
                m = _mm256_max_ps(m, _mm256_loadu_ps(p.add(i)));
            }
            let max = row[whole..].iter().fold(hmax(m), |a, b| a.max(*b));
            let mv = _mm256_set1_ps(max);
            let mut sum = _mm256_setzero_ps();
            for i in (0..whole).step_by(8) {
                let e = exp(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), mv));
                _mm256_storeu_ps(p.add(i), e);
                sum = _mm256_add_ps(sum, e);
            }
            let mut total = hsum(sum);
            for v in &mut row[whole..] {
                *v = vmath::exp(*v - max);
                total += *v;
            }
            total
        }
    }

    /// ctx rows `first + r .. + R`, columns `c .. c + 8·V` of this head.
    #[inline(always)]
    unsafe fn pv_tile<const R: usize, const V: usize>(
        call: Call<'_>,
        unit: Unit,
        first: usize,
        r: usize,
        c: usize,
        scores: &[f32],
        sums: &[f32],
    ) {
        let p = call.padded;
        let stride = 3 * call.shape.hidden;
        // SAFETY (whole block): values of tokens j < unit.len at columns c..c+8V <= d lie
        // in qkv; score rows r..r+R of the block hold unit.len values; ctx rows of this
        // unit at this head's columns are its own to write.
        unsafe {
            let v = call
                .qkv
                .as_ptr()
                .add(at(&call, unit.start, 2, unit.head, c));
            let s = scores.as_ptr().add(r * p);
            let mut acc = [[_mm256_setzero_ps(); V]; R];
            for j in 0..unit.len {
                let mut vv = [_mm256_setzero_ps(); V];
                for (x, vv) in vv.iter_mut().enumerate() {
                    *vv = _mm256_loadu_ps(v.add(j * stride + 8 * x));
                }
                for (i, acc) in acc.iter_mut().enumerate() {
                    let pj = _mm256_broadcast_ss(&*s.add(i * p + j));
                    for (a, vv) in acc.iter_mut().zip(&vv) {
                        *a = _mm256_fmadd_ps(pj, *vv, *a);
                    }
                }
            }
            let h = call.shape.hidden;
            let d = call.shape.head_dim();
            for (i, acc) in acc.iter().enumerate() {
                let inv = _mm256_set1_ps(1.0 / sums[r + i]);
                let row = unit.start + first + r + i;
                let out = call.ctx.0.add(row * h + unit.head * d + c);
                for (x, a) in acc.iter().enumerate() {
                    _mm256_storeu_ps(out.add(8 * x), _mm256_mul_ps(*a, inv));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::values;
    use super::*;

    /// Attention in float64, straight from the definition.
    fn reference(qkv: &[f32], offsets: &[usize], shape: AttentionShape) -> Vec<f64> {
        let (h, d) = (shape.hidden, shape.head_dim());
        let tokens = *offsets.last().unwrap();
        let mut ctx = vec![0f64; tokens * h];
        let get = |t: usize, part: usize, head: usize, c: usize| {
            qkv[t * 3 * h + part * h + head * d + c] as f64
        };
        for w in offsets.windows(2) {
            for head in 0..shape.heads {
                for i in w[0]..w[1] {
                    let s: Vec<f64> = (w[0]..w[1])
                        .map(|j| {
                            (0..d)
                                .map(|c| get(i, 0, head, c) * get(j, 1, head, c))
                                .sum::<f64>()
                                / (d as f64).sqrt()
                        })
                        .collect();
                    let max = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                    let e: Vec<f64> = s.iter().map(|v| (v - max).exp()).collect();
                    let sum: f64 = e.iter().sum();
                    for c in 0..d {
                        ctx[i * h + head * d + c] = (w[0]..w[1])
                            .zip(&e)
                            .map(|(j, p)| p * get(j, 2, head, c))
                            .sum::<f64>()
                            / sum;
                    }
                }
            }
        }
        ctx
    }

    #[test]
    fn matches_float64_on_mixed_lengths_heads_and_paths() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        let lengths = [1usize, 7, 24, 25, 0, 100, 16, 3];
        let mut offsets = vec![0];
        for n in lengths {
            offsets.push(offsets.last().unwrap() + n);
        }
        let tokens = *offsets.last().unwrap();
        let mut scratch = AttentionScratch::default();
        for (hidden, heads) in [(384, 12), (32, 4), (24, 3), (30, 3), (128, 2)] {
            let shape = AttentionShape { hidden, heads };
            // Scores of a few units: large enough that the softmax is far from uniform.
            let qkv: Vec<f32> = values(tokens * 3 * hidden, hidden as u64)
                .iter()
                .map(|v| 4.0 * v)
                .collect();
            let want = reference(&qkv, &offsets, shape);
            for (simd, threads) in [(false, 1), (has_avx2_fma(), 1), (has_avx2_fma(), 2)] {
                let simd = simd && shape.head_dim().is_multiple_of(8);
                let mut ctx = vec![f32::NAN; tokens * hidden];
                pool.install(|| {
                    attention_with(&qkv, &offsets, shape, &mut ctx, &mut scratch, threads, simd)
                })
                .unwrap();
                for (i, (g, w)) in ctx.iter().zip(&want).enumerate() {
                    assert!(
                        (*g as f64 - w).abs() < 1e-5 * (1.0 + w.abs()),
                        "hidden {hidden} heads {heads} simd {simd} threads {threads} at {i}: {g} vs {w}"
                    );
                }
            }
        }
    }

    #[test]
    fn pieces_cover_every_unit_once() {
        let offsets = [0, 5, 5, 300, 301, 320];
        let mut out = Vec::new();
        for pieces in [1, 2, 3, 8, 100] {
            split(&offsets, 4, pieces, &mut out);
            assert!(out.len() <= pieces.max(1));
            assert_eq!(out.first().unwrap().start, 0);
            assert_eq!(out.last().unwrap().end, 20);
            for w in out.windows(2) {
                assert_eq!(w[0].end, w[1].start, "{out:?}");
            }
        }
    }

    #[test]
    fn shapes_that_disagree_are_errors() {
        let shape = AttentionShape {
            hidden: 8,
            heads: 2,
        };
        let mut scratch = AttentionScratch::default();
        let mut ctx = vec![0.0; 16];
        assert!(attention(&[0.0; 47], &[0, 2], shape, &mut ctx, &mut scratch, 1).is_err());
        assert!(attention(&[0.0; 48], &[0, 3, 2], shape, &mut ctx, &mut scratch, 1).is_err());
        let bad = AttentionShape {
            hidden: 8,
            heads: 3,
        };
        assert!(attention(&[0.0; 48], &[0, 2], bad, &mut ctx, &mut scratch, 1).is_err());
    }
}
