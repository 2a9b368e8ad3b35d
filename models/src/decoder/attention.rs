//! Attention over packed sequences for decoders, blockwise: each query meets its keys a
//! block at a time, with a running maximum and sum (the online softmax of FlashAttention),
//! so a sequence of any length never holds more than a block of scores. Query heads in groups read their key/value head where it lies in the `qkv` rows
//! (grouped-query attention without a copy per head). Causal sequences skip the key blocks
//! after their query block; a sliding window skips those out of its reach.

use rayon::prelude::*;

use crate::text::packed::PackedTokens;

/// Keys a block.
const KEY_BLOCK: usize = 64;

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

/// Per (sequence, head): where its queries start in the batch, how many, and which head.
struct Unit<'a> {
    start: usize,
    len: usize,
    head: usize,
    /// Its part of the head-major output, `[len, head_dim]`.
    out: &'a mut [f32],
}

/// `ctx[t, H·d]` = every query head's attention over its sequence, from `qkv[t, (H + 2K)·d]`
/// (queries already rotated), on up to `threads` threads. `head_major` is scratch.
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
    let mut units = Vec::with_capacity(heads.heads * tokens.sequences());
    for (head, mut rest) in head_major.chunks_exact_mut(t * d).enumerate() {
        for seq in 0..tokens.sequences() {
            let range = tokens.range(seq);
            let (out, tail) = rest.split_at_mut(range.len() * d);
            rest = tail;
            units.push(Unit {
                start: range.start,
                len: range.len(),
                head,
                out,
            });
        }
    }
    let run = |u: &mut Unit<'_>| attend_unit(qkv, heads, u);
    if threads > 1 {
        units.par_iter_mut().for_each(run);
    } else {
        units.iter_mut().for_each(run);
    }
    let width = heads.heads * d;
    for (head, values) in head_major.chunks_exact(t * d).enumerate() {
        for (row, value) in ctx.chunks_exact_mut(width).zip(values.chunks_exact(d)) {
            row[head * d..][..d].copy_from_slice(value);
        }
    }
}

/// One head over one sequence.
fn attend_unit(qkv: &[f32], heads: Heads, u: &mut Unit<'_>) {
    let d = heads.head_dim;
    let w = heads.row_width();
    let kv_head = u.head / (heads.heads / heads.kv_heads);
    let q_at = |i: usize| &qkv[(u.start + i) * w + u.head * d..][..d];
    let k_at = |j: usize| &qkv[(u.start + j) * w + (heads.heads + kv_head) * d..][..d];
    let v_at =
        |j: usize| &qkv[(u.start + j) * w + (heads.heads + heads.kv_heads + kv_head) * d..][..d];
    let scale = heads.scale;
    let mut scores = [0f32; KEY_BLOCK];
    let mut acc = vec![0f32; d];
    for i in 0..u.len {
        let q = q_at(i);
        let (lo, hi) = heads.keys_of(i, u.len);
        let (mut max, mut sum) = (f32::NEG_INFINITY, 0f32);
        acc.fill(0.0);
        for block in (lo..hi).step_by(KEY_BLOCK) {
            let end = (block + KEY_BLOCK).min(hi);
            let s = &mut scores[..end - block];
            for (score, j) in s.iter_mut().zip(block..end) {
                *score = dot(q, k_at(j)) * scale;
            }
            let block_max = s.iter().fold(f32::NEG_INFINITY, |m, v| m.max(*v));
            let new_max = max.max(block_max);
            let correction = (max - new_max).exp();
            sum *= correction;
            acc.iter_mut().for_each(|a| *a *= correction);
            for (score, j) in s.iter().zip(block..end) {
                let p = (score - new_max).exp();
                sum += p;
                acc.iter_mut().zip(v_at(j)).for_each(|(a, v)| *a += p * v);
            }
            max = new_max;
        }
        let out = &mut u.out[i * d..][..d];
        out.iter_mut().zip(&acc).for_each(|(o, a)| *o = a / sum);
    }
}

/// `a · b` in eight running sums, which the compiler turns into vector lanes.
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut lanes = [0f32; 8];
    let (a8, b8) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = (a8.remainder().iter())
        .zip(b8.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a8.zip(b8) {
        for k in 0..8 {
            lanes[k] += x[k] * y[k];
        }
    }
    lanes.iter().sum::<f32>() + tail
}
