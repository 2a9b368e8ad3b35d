//! Rotary position embeddings (ModernBERT's, NomicBERT's, GTE's): per position, a cosine
//! and a sine for each pair of a head's values.

use crate::text::packed::PackedTokens;

/// GTE's fixed NTK-aware scaling of rotary frequencies, as its code computes them for
/// every position: with `mixed_b` absent, frequency `k` is `1 / (θ·factor)^(2k / d)`
/// divided by `factor^(2 / d)`; with it, `1 / θ^(2k / d)` divided by
/// `exp(ln(factor) · ((k + 1) / (d / 2))^mixed_b)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ntk {
    pub factor: f64,
    pub mixed_b: Option<f64>,
}

/// Rotary embeddings' cosines and sines, `[position][head_dim / 2]`, as transformers
/// computes them in f32: frequency `k` is `1 / θ^(2k / head_dim)`, unless scaled ([`Ntk`]).
#[derive(Default)]
pub(crate) struct Rotary {
    cos: Vec<f32>,
    sin: Vec<f32>,
    half: usize,
}

impl Rotary {
    /// Makes the tables cover positions `0..span` (keeping larger ones); returns whether
    /// they changed.
    pub(crate) fn fill(
        &mut self,
        theta: f64,
        ntk: Option<Ntk>,
        span: usize,
        head_dim: usize,
    ) -> bool {
        let half = head_dim / 2;
        if self.half == half && self.cos.len() >= span * half {
            return false;
        }
        self.half = half;
        let frequencies = frequencies(theta, ntk, head_dim);
        let angles = (0..span).flat_map(|p| frequencies.iter().map(move |f| p as f32 * f));
        (self.cos, self.sin) = angles
            .map(|a| ((a as f64).cos() as f32, (a as f64).sin() as f32))
            .unzip();
        true
    }

    /// `[position][head_dim / 2]` cosines and sines.
    pub(crate) fn tables(&self) -> (&[f32], &[f32]) {
        (&self.cos, &self.sin)
    }

    /// Turns every head's query and key of each token (the first two thirds of its `qkv`
    /// row) by its position in its sequence ([`Rotary::apply_rows`]).
    pub(crate) fn apply(
        &self,
        qkv: &mut [f32],
        tokens: &PackedTokens,
        hidden: usize,
        head_dim: usize,
    ) {
        self.apply_rows(qkv, tokens, 3 * hidden, 2 * hidden, head_dim);
    }

    /// Turns the first `turned` values of each token's `width`-wide row (its query and key
    /// heads) by its position in its sequence: value `j` of each head's first half with value
    /// `j` of its second, by frequency `j` (transformers' `rotate_half`).
    pub(crate) fn apply_rows(
        &self,
        rows: &mut [f32],
        tokens: &PackedTokens,
        width: usize,
        turned: usize,
        head_dim: usize,
    ) {
        let half = self.half;
        for seq in 0..tokens.sequences() {
            let range = tokens.range(seq);
            let rows = rows[range.start * width..range.end * width].chunks_exact_mut(width);
            for (position, row) in rows.enumerate() {
                let cos = &self.cos[position * half..][..half];
                let sin = &self.sin[position * half..][..half];
                for head in row[..turned].chunks_exact_mut(head_dim) {
                    let (a, b) = head.split_at_mut(half);
                    for j in 0..half {
                        let (x, y) = (a[j], b[j]);
                        a[j] = x * cos[j] - y * sin[j];
                        b[j] = y * cos[j] + x * sin[j];
                    }
                }
            }
        }
    }
}

/// Each pair's frequency, in f32 as torch computes it.
fn frequencies(theta: f64, ntk: Option<Ntk>, head_dim: usize) -> Vec<f32> {
    let half = head_dim / 2;
    let base = match ntk {
        Some(Ntk {
            factor,
            mixed_b: None,
        }) => theta * factor,
        _ => theta,
    };
    let unscaled = |k: usize| 1.0 / (base as f32).powf((2 * k) as f32 / head_dim as f32);
    (0..half)
        .map(|k| match ntk {
            None => unscaled(k),
            Some(Ntk {
                factor,
                mixed_b: None,
            }) => unscaled(k) / factor.powf(2.0 / head_dim as f64) as f32,
            Some(Ntk {
                factor,
                mixed_b: Some(b),
            }) => {
                let a = (factor as f32).ln() / (half as f32).powf(b as f32);
                unscaled(k) / (a * ((k + 1) as f32).powf(b as f32)).exp()
            }
        })
        .collect()
}
