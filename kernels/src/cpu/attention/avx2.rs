//! Attention's query blocks on AVX2 + FMA.

use std::arch::x86_64::*;
use std::ops::Range;

use super::{Block, Call, KEY_TILE, QUERY_BLOCK, Unit};
use crate::cpu::vmath::avx2::{exp, hmax, hsum};

/// `scores[r][j] = scale · query(rows.start + r) · key j` for the key tiles of `keys`
/// (which starts on a tile).
///
/// # Safety
/// AVX2 and FMA are present; d is a multiple of 8; the block's keys were filled for this
/// unit; `keys` lies within the unit.
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn scores(
    call: Call<'_>,
    unit: Unit,
    rows: Range<usize>,
    keys: Range<usize>,
    block: &mut Block<'_>,
) {
    let n = rows.len();
    for tile in keys.start / KEY_TILE..keys.end.div_ceil(KEY_TILE) {
        let mut r = 0;
        while r < n {
            let left = n - r;
            let q = call.at(0, unit.head, unit.start + rows.start + r);
            // SAFETY: rows r..r + min(left, 6) lie in the block and the unit; the tile
            // lies in the padded keys.
            unsafe {
                match left {
                    1 => score_tile::<1>(call, q, r, tile, block),
                    2 => score_tile::<2>(call, q, r, tile, block),
                    3 => score_tile::<3>(call, q, r, tile, block),
                    4 => score_tile::<4>(call, q, r, tile, block),
                    5 => score_tile::<5>(call, q, r, tile, block),
                    _ => score_tile::<6>(call, q, r, tile, block),
                }
            }
            r += left.min(6);
        }
    }
}

/// Scores of the R queries from `heads[q..]` (block rows `r..r+R`) against keys
/// `tile·16..+16`: per step of d, two key vectors and one broadcast query value a row.
#[inline(always)]
unsafe fn score_tile<const R: usize>(
    call: Call<'_>,
    q: usize,
    r: usize,
    tile: usize,
    block: &mut Block<'_>,
) {
    let (d, p) = (call.shape.head_dim(), call.padded);
    let j = tile * KEY_TILE;
    // SAFETY (whole block): R query rows of d values from heads[q..] lie in the unit;
    // keys c·p + j + 16 <= d·p; score rows r + R <= QUERY_BLOCK, p wide, with
    // j + 16 <= p. Keys and scores start on cache lines and p, j are multiples of 16, so
    // the aligned accesses are.
    unsafe {
        let qp = call.heads.as_ptr().add(q);
        let k = block.keys.as_ptr().add(j);
        let mut acc = [[_mm256_setzero_ps(); 2]; R];
        for c in 0..d {
            let k0 = _mm256_load_ps(k.add(c * p));
            let k1 = _mm256_load_ps(k.add(c * p + 8));
            for (i, acc) in acc.iter_mut().enumerate() {
                let qv = _mm256_broadcast_ss(&*qp.add(i * d + c));
                acc[0] = _mm256_fmadd_ps(qv, k0, acc[0]);
                acc[1] = _mm256_fmadd_ps(qv, k1, acc[1]);
            }
        }
        let scale = _mm256_set1_ps(call.scale);
        for (i, acc) in acc.iter().enumerate() {
            let s = block.scores.as_mut_ptr().add((r + i) * p + j);
            _mm256_store_ps(s, _mm256_mul_ps(acc[0], scale));
            _mm256_store_ps(s.add(8), _mm256_mul_ps(acc[1], scale));
        }
    }
}

/// Turns each row of scores of `keys` into probabilities (unnormalised), multiplies them
/// into those keys' values and writes the rows of ctx divided by their sums.
///
/// # Safety
/// As [`scores`]; no other thread writes this unit's part of ctx.
#[target_feature(enable = "avx2,fma")]
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
        // SAFETY: AVX2 and FMA are enabled here.
        *sum = unsafe { softmax_row(row) };
    }
    let tile = Tile {
        first: rows.start,
        keys,
    };
    let d = call.shape.head_dim();
    let mut c = 0;
    while c < d {
        let wide = d - c >= 32;
        let mut r = 0;
        while r < rows.len() {
            let n = (rows.len() - r).min(3);
            // SAFETY: rows r..r+n of the block, columns c..c+32 (or +8) within d.
            unsafe {
                match (n, wide) {
                    (3, true) => pv_tile::<3, 4>(call, unit, &tile, r, c, block, &sums),
                    (2, true) => pv_tile::<2, 4>(call, unit, &tile, r, c, block, &sums),
                    (1, true) => pv_tile::<1, 4>(call, unit, &tile, r, c, block, &sums),
                    (3, false) => pv_tile::<3, 1>(call, unit, &tile, r, c, block, &sums),
                    (2, false) => pv_tile::<2, 1>(call, unit, &tile, r, c, block, &sums),
                    _ => pv_tile::<1, 1>(call, unit, &tile, r, c, block, &sums),
                }
            }
            r += n;
        }
        c += if wide { 32 } else { 8 };
    }
}

/// `row = exp(row - max(row))`; returns the sum. A tail of fewer than eight values is
/// one masked vector, as short sequences end in one.
#[target_feature(enable = "avx2,fma")]
unsafe fn softmax_row(row: &mut [f32]) -> f32 {
    let n = row.len();
    let whole = n / 8 * 8;
    let tail = n - whole;
    let p = row.as_mut_ptr();
    // SAFETY (whole block): offsets below `whole` <= n; the masked accesses touch only
    // the `tail` values past it.
    unsafe {
        let lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(tail as i32), lanes);
        let neg = _mm256_set1_ps(f32::NEG_INFINITY);
        let rest = _mm256_blendv_ps(
            neg,
            _mm256_maskload_ps(p.add(whole), mask),
            _mm256_castsi256_ps(mask),
        );
        let mut m = rest;
        for i in (0..whole).step_by(8) {
            m = _mm256_max_ps(m, _mm256_loadu_ps(p.add(i)));
        }
        let mv = _mm256_set1_ps(hmax(m));
        let mut sum = _mm256_setzero_ps();
        for i in (0..whole).step_by(8) {
            let e = exp(_mm256_sub_ps(_mm256_loadu_ps(p.add(i)), mv));
            _mm256_storeu_ps(p.add(i), e);
            sum = _mm256_add_ps(sum, e);
        }
        if tail > 0 {
            let e = _mm256_and_ps(exp(_mm256_sub_ps(rest, mv)), _mm256_castsi256_ps(mask));
            _mm256_maskstore_ps(p.add(whole), mask, e);
            sum = _mm256_add_ps(sum, e);
        }
        hsum(sum)
    }
}

/// Where [`pv_tile`] works: the block's first query in the unit, and the keys it weighs.
struct Tile {
    first: usize,
    keys: Range<usize>,
}

/// ctx rows `first + r .. + R` of the unit, columns `c .. c + 8·V` of its head, from the
/// probabilities of `tile.keys`. The R probabilities of a key are broadcast once and each
/// value vector is loaded as it is used, so that the 3 × 4 tile fits the sixteen
/// registers without spilling.
#[inline(always)]
unsafe fn pv_tile<const R: usize, const V: usize>(
    call: Call<'_>,
    unit: Unit,
    tile: &Tile,
    r: usize,
    c: usize,
    block: &Block<'_>,
    sums: &[f32],
) {
    let (d, p) = (call.shape.head_dim(), call.padded);
    // SAFETY (whole block): value rows j in tile.keys (within unit.len) at columns
    // c..c+8V <= d lie in the unit's head-major values; score rows r..r+R of the block
    // hold values for tile.keys;
    // ctx rows of this unit at this head's columns are its own to write.
    unsafe {
        let v = call
            .heads
            .as_ptr()
            .add(call.at(2, unit.head, unit.start) + c);
        let s = block.scores.as_ptr().add(r * p);
        let mut acc = [[_mm256_setzero_ps(); V]; R];
        for j in tile.keys.clone() {
            let mut pj = [_mm256_setzero_ps(); R];
            for (i, pj) in pj.iter_mut().enumerate() {
                *pj = _mm256_broadcast_ss(&*s.add(i * p + j));
            }
            for x in 0..V {
                let vv = _mm256_loadu_ps(v.add(j * d + 8 * x));
                for (acc, pj) in acc.iter_mut().zip(&pj) {
                    acc[x] = _mm256_fmadd_ps(*pj, vv, acc[x]);
                }
            }
        }
        let h = call.shape.hidden;
        for (i, acc) in acc.iter().enumerate() {
            let inv = _mm256_set1_ps(1.0 / sums[r + i]);
            let row = unit.start + tile.first + r + i;
            let out = call.ctx.0.add(row * h + unit.head * d + c);
            for (x, a) in acc.iter().enumerate() {
                _mm256_storeu_ps(out.add(8 * x), _mm256_mul_ps(*a, inv));
            }
        }
    }
}
