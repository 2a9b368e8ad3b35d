//! Attention's query blocks on AVX-512: the AVX2 kernels' layout with sixteen lanes. A
//! block of scores is up to twelve queries × 32 keys (24 accumulators of the 32
//! registers: per step of d, two key vectors and twelve broadcasts for 24 multiply-adds);
//! the weighted values take up to six queries × 32 columns, or four × 64.

use std::arch::x86_64::*;
use std::ops::Range;

use super::{Block, Call, KEY_TILE, QUERY_BLOCK, Unit};
use crate::cpu::vmath::avx512::exp;

/// `scores[r][j] = scale · query(rows.start + r) · key j` for the key tiles of `keys`
/// (which starts on a tile), 32 keys at a time and a last 16 if the tiles are odd.
///
/// # Safety
/// AVX-512 F is present; d is a multiple of 16; the block's keys were filled for this
/// unit; `keys` lies within the unit.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn scores(
    call: Call<'_>,
    unit: Unit,
    rows: Range<usize>,
    keys: Range<usize>,
    block: &mut Block<'_>,
) {
    let n = rows.len();
    let end = keys.end.div_ceil(KEY_TILE) * KEY_TILE;
    let mut j = keys.start;
    while j < end {
        let wide = j + 2 * KEY_TILE <= end;
        let mut r = 0;
        while r < n {
            let take = (n - r).min(12);
            let q = call.at(0, unit.head, unit.start + rows.start + r);
            // SAFETY: rows r..r + take lie in the block and the unit; keys j..j + 16 (32
            // when wide) lie in the padded keys.
            unsafe {
                match wide {
                    true => score_rows::<2>(take, call, q, r, j, block),
                    false => score_rows::<1>(take, call, q, r, j, block),
                }
            }
            r += take;
        }
        j += if wide { 2 * KEY_TILE } else { KEY_TILE };
    }
}

/// [`score_tile`] for `rows` (1 to 12) queries.
#[inline(always)]
unsafe fn score_rows<const K: usize>(
    rows: usize,
    call: Call<'_>,
    q: usize,
    r: usize,
    j: usize,
    block: &mut Block<'_>,
) {
    // SAFETY: forwarded contract.
    unsafe {
        match rows {
            1 => score_tile::<1, K>(call, q, r, j, block),
            2 => score_tile::<2, K>(call, q, r, j, block),
            3 => score_tile::<3, K>(call, q, r, j, block),
            4 => score_tile::<4, K>(call, q, r, j, block),
            5 => score_tile::<5, K>(call, q, r, j, block),
            6 => score_tile::<6, K>(call, q, r, j, block),
            7 => score_tile::<7, K>(call, q, r, j, block),
            8 => score_tile::<8, K>(call, q, r, j, block),
            9 => score_tile::<9, K>(call, q, r, j, block),
            10 => score_tile::<10, K>(call, q, r, j, block),
            11 => score_tile::<11, K>(call, q, r, j, block),
            _ => score_tile::<12, K>(call, q, r, j, block),
        }
    }
}

/// Scores of the R queries from `heads[q..]` (block rows `r..r+R`) against keys
/// `j..j + 16·K`.
#[inline(always)]
unsafe fn score_tile<const R: usize, const K: usize>(
    call: Call<'_>,
    q: usize,
    r: usize,
    j: usize,
    block: &mut Block<'_>,
) {
    let (d, p) = (call.shape.head_dim(), call.padded);
    // SAFETY (whole block): R query rows of d values from heads[q..] lie in the unit;
    // keys c·p + j + 16K <= d·p; score rows r + R <= QUERY_BLOCK, p wide, with
    // j + 16K <= p. Keys and scores start on cache lines and p, j are multiples of 16, so
    // the aligned accesses are.
    unsafe {
        let qp = call.heads.as_ptr().add(q);
        let k = block.keys.as_ptr().add(j);
        let mut acc = [[_mm512_setzero_ps(); K]; R];
        for c in 0..d {
            let mut kv = [_mm512_setzero_ps(); K];
            for (x, kv) in kv.iter_mut().enumerate() {
                *kv = _mm512_load_ps(k.add(c * p + 16 * x));
            }
            for (i, acc) in acc.iter_mut().enumerate() {
                let qv = _mm512_set1_ps(*qp.add(i * d + c));
                for (acc, kv) in acc.iter_mut().zip(&kv) {
                    *acc = _mm512_fmadd_ps(qv, *kv, *acc);
                }
            }
        }
        let scale = _mm512_set1_ps(call.scale);
        for (i, acc) in acc.iter().enumerate() {
            let s = block.scores.as_mut_ptr().add((r + i) * p + j);
            for (x, a) in acc.iter().enumerate() {
                _mm512_store_ps(s.add(16 * x), _mm512_mul_ps(*a, scale));
            }
        }
    }
}

/// Turns each row of scores of `keys` into probabilities (unnormalised), multiplies them
/// into those keys' values and writes the rows of ctx divided by their sums.
///
/// # Safety
/// As [`scores`]; no other thread writes this unit's part of ctx.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn softmax_values(
    call: Call<'_>,
    unit: Unit,
    rows: Range<usize>,
    keys: Range<usize>,
    block: &mut Block<'_>,
) {
    let p = call.padded;
    let mut sums = [0f32; QUERY_BLOCK];
    for (r, sum) in sums.iter_mut().enumerate().take(rows.len()) {
        let row = &mut block.scores[r * p + keys.start..r * p + keys.end];
        // SAFETY: AVX-512 F is enabled here.
        *sum = unsafe { softmax_row(row) };
    }
    let tile = Tile {
        first: rows.start,
        keys,
        sums: &sums,
    };
    let d = call.shape.head_dim();
    let mut c = 0;
    while c < d {
        let wide = d - c >= 64;
        let mut r = 0;
        while r < rows.len() {
            let left = rows.len() - r;
            // SAFETY: rows r.. of the block, columns c..c+64 (or +32, +16) within d.
            unsafe {
                match (wide, d - c >= 32) {
                    (true, _) => pv_rows::<4, 4>(left, call, unit, &tile, r, c, block),
                    (false, true) => pv_rows::<6, 2>(left, call, unit, &tile, r, c, block),
                    (false, false) => pv_rows::<6, 1>(left, call, unit, &tile, r, c, block),
                }
            }
            r += left.min(if wide { 4 } else { 6 });
        }
        c += if wide {
            64
        } else if d - c >= 32 {
            32
        } else {
            16
        };
    }
}

/// `row = exp(row - max(row))`; returns the sum. A tail of fewer than sixteen values is
/// one masked vector.
#[target_feature(enable = "avx512f")]
unsafe fn softmax_row(row: &mut [f32]) -> f32 {
    let n = row.len();
    let whole = n / 16 * 16;
    let tail: __mmask16 = ((1u32 << (n - whole)) - 1) as __mmask16;
    let p = row.as_mut_ptr();
    // SAFETY (whole block): offsets below `whole` <= n; the masked accesses touch only
    // the values past it, below n.
    unsafe {
        let neg = _mm512_set1_ps(f32::NEG_INFINITY);
        let rest = _mm512_mask_loadu_ps(neg, tail, p.add(whole));
        let mut m = rest;
        for i in (0..whole).step_by(16) {
            m = _mm512_max_ps(m, _mm512_loadu_ps(p.add(i)));
        }
        let mv = _mm512_set1_ps(_mm512_reduce_max_ps(m));
        let mut sum = _mm512_setzero_ps();
        for i in (0..whole).step_by(16) {
            let e = exp(_mm512_sub_ps(_mm512_loadu_ps(p.add(i)), mv));
            _mm512_storeu_ps(p.add(i), e);
            sum = _mm512_add_ps(sum, e);
        }
        if tail != 0 {
            let e = _mm512_maskz_mov_ps(tail, exp(_mm512_sub_ps(rest, mv)));
            _mm512_mask_storeu_ps(p.add(whole), tail, e);
            sum = _mm512_add_ps(sum, e);
        }
        _mm512_reduce_add_ps(sum)
    }
}

/// Where [`pv_tile`] works: the block's first query in the unit, the keys it weighs, and
/// each row's sum of probabilities.
struct Tile<'a> {
    first: usize,
    keys: Range<usize>,
    sums: &'a [f32; QUERY_BLOCK],
}

/// [`pv_tile`] for up to `MAX_R` of the `left` rows.
#[inline(always)]
unsafe fn pv_rows<const MAX_R: usize, const V: usize>(
    left: usize,
    call: Call<'_>,
    unit: Unit,
    tile: &Tile<'_>,
    r: usize,
    c: usize,
    block: &Block<'_>,
) {
    // SAFETY: forwarded contract.
    unsafe {
        match left.min(MAX_R) {
            1 => pv_tile::<1, V>(call, unit, tile, r, c, block),
            2 => pv_tile::<2, V>(call, unit, tile, r, c, block),
            3 => pv_tile::<3, V>(call, unit, tile, r, c, block),
            4 => pv_tile::<4, V>(call, unit, tile, r, c, block),
            5 => pv_tile::<5, V>(call, unit, tile, r, c, block),
            _ => pv_tile::<6, V>(call, unit, tile, r, c, block),
        }
    }
}

/// ctx rows `first + r .. + R` of the unit, columns `c .. c + 16·V` of its head, from the
/// probabilities of `tile.keys`.
#[inline(always)]
unsafe fn pv_tile<const R: usize, const V: usize>(
    call: Call<'_>,
    unit: Unit,
    tile: &Tile<'_>,
    r: usize,
    c: usize,
    block: &Block<'_>,
) {
    let (d, p) = (call.shape.head_dim(), call.padded);
    // SAFETY (whole block): value rows j in tile.keys (within unit.len) at columns
    // c..c+16V <= d lie in the unit's head-major values; score rows r..r+R of the block
    // hold values for tile.keys; ctx rows of this unit at this head's columns are its own
    // to write.
    unsafe {
        let v = (call.heads.as_ptr()).add(call.at(2, unit.head, unit.start) + c);
        let s = block.scores.as_ptr().add(r * p);
        let mut acc = [[_mm512_setzero_ps(); V]; R];
        for j in tile.keys.clone() {
            let mut pj = [_mm512_setzero_ps(); R];
            for (i, pj) in pj.iter_mut().enumerate() {
                *pj = _mm512_set1_ps(*s.add(i * p + j));
            }
            for x in 0..V {
                let vv = _mm512_loadu_ps(v.add(j * d + 16 * x));
                for (acc, pj) in acc.iter_mut().zip(&pj) {
                    acc[x] = _mm512_fmadd_ps(*pj, vv, acc[x]);
                }
            }
        }
        let h = call.shape.hidden;
        for (i, acc) in acc.iter().enumerate() {
            let inv = _mm512_set1_ps(1.0 / tile.sums[r + i]);
            let row = unit.start + tile.first + r + i;
            let out = call.ctx.0.add(row * h + unit.head * d + c);
            for (x, a) in acc.iter().enumerate() {
                _mm512_storeu_ps(out.add(16 * x), _mm512_mul_ps(*a, inv));
            }
        }
    }
}
