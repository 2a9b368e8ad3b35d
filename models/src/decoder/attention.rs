//! Attention over packed sequences for decoders, blockwise: a run of queries meets its keys
//! a block at a time, with a running maximum and sum per query (the online softmax of
//! FlashAttention), so a sequence of any length never holds more than a block of scores.
//! Query heads in groups read their key/value head where it lies in the `qkv` rows
//! (grouped-query attention without a copy per head). A causal query skips the keys after
//! it; a sliding window skips those out of its reach.

use std::ops::Range;

use kernels::cpu::exp_in_place;
use rayon::prelude::*;

use crate::text::packed::PackedTokens;

/// Keys a block.
const KEY_BLOCK: usize = 64;
/// Queries a unit of work at most: its state (a running sum of `head_dim` values each)
/// stays in the cache while the keys it sees go by.
const PIECE_QUERIES: usize = 128;

/// How the heads lie in a `qkv` row, and which keys a query sees.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Heads {
    pub(crate) heads: usize,
    pub(crate) kv_heads: usize,
    pub(crate) head_dim: usize,
    /// A query sees only the keys at or before it.
    pub(crate) causal: bool,
    /// A query sees only the keys at most this many positions away.
    pub(crate) window: Option<usize>,
    /// What the scores are multiplied by before the softmax.
    pub(crate) scale: f32,
}

impl Heads {
    fn row_width(&self) -> usize {
        (self.heads + 2 * self.kv_heads) * self.head_dim
    }

    /// The keys query `i` of a sequence of `n` sees: `lo..hi`.
    fn keys_of(&self, i: usize, n: usize) -> (usize, usize) {
        let hi = if self.causal { i + 1 } else { n };
        let lo = self.window.map_or(0, |w| i.saturating_sub(w));
        let hi = self.window.map_or(hi, |w| hi.min(i + w + 1));
        (lo, hi)
    }
}

/// Some queries of one head over its sequence: where the sequence starts in the batch, its
/// length, the head, and which of its queries.
struct Unit<'a> {
    start: usize,
    len: usize,
    head: usize,
    queries: Range<usize>,
    /// Its part of the head-major output, `[queries, head_dim]`.
    out: &'a mut [f32],
}

impl Unit<'_> {
    /// The pairs of tokens it scores, near enough to share work out by.
    fn cost(&self, heads: &Heads) -> usize {
        let (lo, _) = heads.keys_of(self.queries.start, self.len);
        let (_, hi) = heads.keys_of(self.queries.end - 1, self.len);
        self.queries.len() * (hi - lo)
    }
}

/// `ctx[t, H·d]` = every query head's attention over its sequence, from `qkv[t, (H + 2K)·d]`
/// (queries already rotated), on up to `threads` threads: the work is cut by head, sequence
/// and runs of queries, so that even one long text of few heads keeps every thread busy.
/// `head_major` is scratch.
pub(crate) fn attend(
    qkv: &[f32],
    tokens: &PackedTokens,
    heads: Heads,
    ctx: &mut [f32],
    head_major: &mut Vec<f32>,
    threads: usize,
) {
    let (t, d) = (tokens.tokens(), heads.head_dim);
    head_major.resize(heads.heads * t * d, 0.0);
    let mut units = Vec::new();
    for (head, mut rest) in head_major.chunks_exact_mut(t * d).enumerate() {
        for seq in 0..tokens.sequences() {
            let range = tokens.range(seq);
            for q0 in (0..range.len()).step_by(PIECE_QUERIES) {
                let queries = q0..(q0 + PIECE_QUERIES).min(range.len());
                let (out, tail) = rest.split_at_mut(queries.len() * d);
                rest = tail;
                let (start, len) = (range.start, range.len());
                units.push(Unit {
                    start,
                    len,
                    head,
                    queries,
                    out,
                });
            }
        }
    }
    let shares = share_out(units, threads.max(1), &heads);
    let run = |share: &mut Vec<Unit<'_>>| {
        share.iter_mut().for_each(|u| attend_unit(qkv, heads, u));
    };
    match shares.len() {
        0 | 1 => shares.into_iter().for_each(|mut s| run(&mut s)),
        _ => shares.into_par_iter().for_each(|mut s| run(&mut s)),
    }
    let width = heads.heads * d;
    for (head, values) in head_major.chunks_exact(t * d).enumerate() {
        for (row, value) in ctx.chunks_exact_mut(width).zip(values.chunks_exact(d)) {
            row[head * d..][..d].copy_from_slice(value);
        }
    }
}

/// `units` in at most `threads` runs of about equal cost, in order.
fn share_out<'a>(units: Vec<Unit<'a>>, threads: usize, heads: &Heads) -> Vec<Vec<Unit<'a>>> {
    let total: usize = units.iter().map(|u| u.cost(heads)).sum();
    let per_thread = total.div_ceil(threads).max(1);
    let (mut shares, mut share, mut filled) = (Vec::new(), Vec::new(), 0);
    for unit in units {
        if filled >= per_thread && shares.len() + 1 < threads {
            shares.push(std::mem::take(&mut share));
            filled = 0;
        }
        filled += unit.cost(heads);
        share.push(unit);
    }
    shares.push(share);
    shares
}

/// [`attend_unit_body`] compiled for the widest vectors the CPU has: the crate is built for
/// every x86-64, whose baseline (SSE2) would give it a quarter of AVX-512's lanes.
fn attend_unit(qkv: &[f32], heads: Heads, u: &mut Unit<'_>) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
        // SAFETY: AVX-512 F is present (checked above).
        return unsafe { attend_unit_avx512(qkv, heads, u) };
    }
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        // SAFETY: AVX2 and FMA are present (checked above).
        return unsafe { attend_unit_avx2(qkv, heads, u) };
    }
    attend_unit_body(qkv, heads, u);
}

/// # Safety
/// The CPU must support AVX-512 F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn attend_unit_avx512(qkv: &[f32], heads: Heads, u: &mut Unit<'_>) {
    attend_unit_body(qkv, heads, u);
}

/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn attend_unit_avx2(qkv: &[f32], heads: Heads, u: &mut Unit<'_>) {
    attend_unit_body(qkv, heads, u);
}

/// Some queries of one head: for each block of the keys they see, the block is laid out by
/// value (`[head_dim][KEY_BLOCK]`) once, then every block of queries that sees it scores it
/// (rows of multiply-adds across 64 keys, held in registers), folds it into each query's
/// running maximum and sum, and adds its weighted values (a run of 64 of a query's values
/// held in registers across the keys).
#[inline(always)]
fn attend_unit_body(qkv: &[f32], heads: Heads, u: &mut Unit<'_>) {
    let (d, w, n) = (heads.head_dim, heads.row_width(), u.len);
    let kv_head = u.head / (heads.heads / heads.kv_heads);
    let (q_at, k_at, v_at) = (
        u.head * d,
        (heads.heads + kv_head) * d,
        (heads.heads + heads.kv_heads + kv_head) * d,
    );
    let row = |i: usize| &qkv[(u.start + i) * w..][..w];
    let queries = u.queries.clone();
    let mut running = vec![(f32::NEG_INFINITY, 0f32); queries.len()];
    let mut acc = vec![0f32; queries.len() * d];
    let mut keys = vec![0f32; d * KEY_BLOCK];
    let mut scores = [0f32; KEY_BLOCK];
    let (lo, hi) = (
        heads.keys_of(queries.start, n).0,
        heads.keys_of(queries.end - 1, n).1,
    );
    for k0 in (lo..hi).step_by(KEY_BLOCK) {
        let kn = KEY_BLOCK.min(hi - k0);
        keys.fill(0.0);
        for j in 0..kn {
            for (c, k) in row(k0 + j)[k_at..][..d].iter().enumerate() {
                keys[c * KEY_BLOCK + j] = *k;
            }
        }
        for i in queries.clone() {
            let (first, end) = heads.keys_of(i, n);
            if end <= k0 || first >= k0 + kn {
                continue;
            }
            score_block(&row(i)[q_at..][..d], &keys, &mut scores);
            for (j, v) in scores[..kn].iter_mut().enumerate() {
                let seen = (first..end).contains(&(k0 + j));
                *v = if seen {
                    *v * heads.scale
                } else {
                    f32::NEG_INFINITY
                };
            }
            let at = i - queries.start;
            let a = &mut acc[at * d..][..d];
            running[at] = softmax_step(&mut scores[..kn], running[at], a);
            add_values(a, &scores[..kn], |j| &row(k0 + j)[v_at..][..d]);
        }
    }
    for (at, (out, a)) in u
        .out
        .chunks_exact_mut(d)
        .zip(acc.chunks_exact(d))
        .enumerate()
    {
        let inv = 1.0 / running[at].1;
        out.iter_mut().zip(a).for_each(|(o, a)| *o = a * inv);
    }
}

/// `s[j] = q · key j` for a block of keys laid out by value (`keys[c · KEY_BLOCK + j]`,
/// zeros past the block's keys).
#[inline(always)]
fn score_block(q: &[f32], keys: &[f32], s: &mut [f32; KEY_BLOCK]) {
    let mut sums = [0f32; KEY_BLOCK];
    for (k, &qc) in keys.chunks_exact(KEY_BLOCK).zip(q) {
        for x in 0..KEY_BLOCK {
            sums[x] = qc.mul_add(k[x], sums[x]);
        }
    }
    *s = sums;
}

/// `a += Σ_j p[j] · value(j)`, a run of 64 of `a`'s values at a time.
#[inline(always)]
fn add_values<'v>(a: &mut [f32], p: &[f32], value: impl Fn(usize) -> &'v [f32]) {
    const RUN: usize = 64;
    let whole = a.len() / RUN * RUN;
    for (r, run) in a[..whole].chunks_exact_mut(RUN).enumerate() {
        let mut sums = [0f32; RUN];
        sums.copy_from_slice(run);
        for (j, &pj) in p.iter().enumerate() {
            let v = &value(j)[r * RUN..][..RUN];
            for x in 0..RUN {
                sums[x] = pj.mul_add(v[x], sums[x]);
            }
        }
        run.copy_from_slice(&sums);
    }
    for (j, &pj) in p.iter().enumerate() {
        let v = &value(j)[whole..];
        a[whole..]
            .iter_mut()
            .zip(v)
            .for_each(|(a, v)| *a = pj.mul_add(*v, *a));
    }
}

/// One block of a row's scores into its running `(maximum, sum)`: the scores become their
/// weights `e^(s − maximum)` (0 where masked), and the row's accumulated values are scaled
/// down to the new maximum. Returns the new running pair.
#[inline(always)]
fn softmax_step(s: &mut [f32], (max, sum): (f32, f32), acc: &mut [f32]) -> (f32, f32) {
    let block_max = s.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v));
    if block_max == f32::NEG_INFINITY {
        // This query sees none of these keys.
        s.fill(0.0);
        return (max, sum);
    }
    let new_max = max.max(block_max);
    s.iter_mut().for_each(|v| *v -= new_max);
    exp_in_place(s);
    let correction = (max - new_max).exp();
    if correction != 1.0 {
        acc.iter_mut().for_each(|a| *a *= correction);
    }
    (new_max, sum * correction + s.iter().sum::<f32>())
}
