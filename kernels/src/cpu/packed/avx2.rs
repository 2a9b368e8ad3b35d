//! The panel kernel on AVX2 + FMA (+ F16C for f16 weights).

use std::arch::x86_64::*;
use std::ops::Range;

use super::{Format, PANEL, ROW_BLOCK, Shape, tile_rows};
use crate::Activation;

/// # Safety
/// As [`super::dense`], and the CPU must support AVX2, FMA and F16C.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dense<F: Format>(
    x: &[f32],
    p: &[F::Bits],
    bias: &[f32],
    y: *mut f32,
    s: Shape,
    panels: Range<usize>,
    act: Activation,
) {
    let mut block = 0;
    while block < s.rows {
        let block_rows = ROW_BLOCK.min(s.rows - block);
        let mut panel = panels.start;
        while panel < panels.end {
            if block_rows == 1 && panel + 2 <= panels.end {
                // One row: two panels at a time, the features split three ways, so the
                // tile has twelve accumulators and two weight streams.
                // SAFETY: block < s.rows and panel + 2 <= panels.end, per the contract.
                unsafe { tile::<F, 1, 2, 3>(x, p, bias, y, s, panel, block, act) };
                panel += 2;
                continue;
            }
            let mut b = block;
            let mut left = block_rows;
            while left > 0 {
                let rows = tile_rows(left);
                // SAFETY: b + rows <= s.rows and panel < panels.end, per the contract.
                unsafe {
                    // Two and three rows split the feature loop into 3 and 2 independent
                    // accumulator sets, so every tile has 8–12 chains.
                    match rows {
                        6 => tile::<F, 6, 1, 1>(x, p, bias, y, s, panel, b, act),
                        5 => tile::<F, 5, 1, 1>(x, p, bias, y, s, panel, b, act),
                        4 => tile::<F, 4, 1, 1>(x, p, bias, y, s, panel, b, act),
                        3 => tile::<F, 3, 1, 2>(x, p, bias, y, s, panel, b, act),
                        2 => tile::<F, 2, 1, 3>(x, p, bias, y, s, panel, b, act),
                        _ => tile::<F, 1, 1, 6>(x, p, bias, y, s, panel, b, act),
                    }
                }
                b += rows;
                left -= rows;
            }
            panel += 1;
        }
        block += block_rows;
    }
}

/// One register tile: rows `b..b+NR` of panels `panel..panel+NP`, the features taken
/// `SPLIT` at a time into separate accumulators.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile<F: Format, const NR: usize, const NP: usize, const SPLIT: usize>(
    x: &[f32],
    p: &[F::Bits],
    bias: &[f32],
    y: *mut f32,
    s: Shape,
    panel: usize,
    b: usize,
    act: Activation,
) {
    let k = s.k;
    // SAFETY (whole block): x is read below (b + NR) * k, the panels' values below
    // (panel + NP) * k * PANEL, the biases below (panel + NP) * PANEL, and y is written
    // below (b + NR) * n at columns < n — all within the caller's contract. The panels
    // start on a cache line (Aligned) and their rows are PANEL values wide, so every
    // eight weights loaded start on 16 bytes (32 for f32), as `Format::load8` needs.
    unsafe {
        let xp = x.as_ptr();
        // The j-th 8-lane column of the tile at feature kk: panel j / 2, half j % 2.
        let weights = |kk: usize, j: usize| {
            F::load8(
                p.as_ptr()
                    .add((panel + j / 2) * k * PANEL + kk * PANEL + j % 2 * 8),
            )
        };
        let mut acc = [[[[_mm256_setzero_ps(); 2]; NP]; NR]; SPLIT];
        let whole = k / SPLIT * SPLIT;
        let mut kk = 0;
        while kk < whole {
            for (u, acc) in acc.iter_mut().enumerate() {
                let mut w = [[_mm256_setzero_ps(); 2]; NP];
                for (q, w) in w.iter_mut().enumerate() {
                    *w = [weights(kk + u, 2 * q), weights(kk + u, 2 * q + 1)];
                }
                for (r, acc) in acc.iter_mut().enumerate() {
                    let v = _mm256_broadcast_ss(&*xp.add((b + r) * k + kk + u));
                    for (acc, w) in acc.iter_mut().zip(&w) {
                        acc[0] = _mm256_fmadd_ps(v, w[0], acc[0]);
                        acc[1] = _mm256_fmadd_ps(v, w[1], acc[1]);
                    }
                }
            }
            kk += SPLIT;
        }
        while kk < k {
            for (r, acc) in acc[0].iter_mut().enumerate() {
                let v = _mm256_broadcast_ss(&*xp.add((b + r) * k + kk));
                for (q, acc) in acc.iter_mut().enumerate() {
                    acc[0] = _mm256_fmadd_ps(v, weights(kk, 2 * q), acc[0]);
                    acc[1] = _mm256_fmadd_ps(v, weights(kk, 2 * q + 1), acc[1]);
                }
            }
            kk += 1;
        }
        store::<NR, NP, SPLIT>(&acc, bias, y, s, panel, b, act);
    }
}

/// The tile's epilogue: sums the split accumulators, adds the biases, applies the
/// activation and stores rows `b..b+NR` of panels `panel..panel+NP` (only the real columns
/// of a last, partial panel). Inlined into the kernel, so the accumulators stay in
/// registers.
#[inline(always)]
unsafe fn store<const NR: usize, const NP: usize, const SPLIT: usize>(
    acc: &[[[[__m256; 2]; NP]; NR]; SPLIT],
    bias: &[f32],
    y: *mut f32,
    s: Shape,
    panel: usize,
    b: usize,
    act: Activation,
) {
    // SAFETY (whole block): the biases are read below (panel + NP) * PANEL and y is written
    // below (b + NR) * n at columns < n, within `tile`'s contract.
    unsafe {
        for q in 0..NP {
            let o = (panel + q) * PANEL;
            let valid = (s.n - o).min(PANEL);
            for r in 0..NR {
                let mut v0 = _mm256_loadu_ps(bias.as_ptr().add(o));
                let mut v1 = _mm256_loadu_ps(bias.as_ptr().add(o + 8));
                for acc in acc {
                    v0 = _mm256_add_ps(v0, acc[r][q][0]);
                    v1 = _mm256_add_ps(v1, acc[r][q][1]);
                }
                match act {
                    Activation::Identity => {}
                    Activation::Relu => {
                        let zero = _mm256_setzero_ps();
                        v0 = _mm256_max_ps(v0, zero);
                        v1 = _mm256_max_ps(v1, zero);
                    }
                    Activation::Gelu => {
                        v0 = crate::cpu::vmath::avx2::gelu(v0);
                        v1 = crate::cpu::vmath::avx2::gelu(v1);
                    }
                }
                let yp = y.add((b + r) * s.n + o);
                if valid == PANEL {
                    _mm256_storeu_ps(yp, v0);
                    _mm256_storeu_ps(yp.add(8), v1);
                } else {
                    // The last panel of a layer whose outputs are not a multiple of 16:
                    // only its real columns are written.
                    let mut lanes = [0f32; PANEL];
                    _mm256_storeu_ps(lanes.as_mut_ptr(), v0);
                    _mm256_storeu_ps(lanes.as_mut_ptr().add(8), v1);
                    std::ptr::copy_nonoverlapping(lanes.as_ptr(), yp, valid);
                }
            }
        }
    }
}
