//! The panel kernel on AVX-512: a panel's 16 outputs are one register, so a tile of eight
//! rows × two panels keeps sixteen accumulators and takes, per input feature, two weight
//! loads and eight broadcasts for sixteen multiply-adds of 16 lanes — twice the work per
//! instruction of the AVX2 tile, from the same panels.

use std::arch::x86_64::*;
use std::ops::Range;

use super::{Format, PANEL, ROW_BLOCK, Shape};
use crate::Activation;

/// Rows per tile: up to eight, and a remainder of nine to fifteen cut in two near-equal
/// tiles rather than eight and a few.
pub(super) fn tile_rows(left: usize) -> usize {
    match left {
        0..=8 => left,
        9..=15 => left.div_ceil(2),
        _ => 8,
    }
}

/// # Safety
/// As [`super::dense`], and the CPU must support AVX-512 F.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn dense<F: Format>(
    x: &[f32],
    p: &[F::Bits],
    bias: &[f32],
    y: *mut f32,
    s: Shape,
    panels: Range<usize>,
    act: Activation,
) {
    let tiles = Panels::<F> { x, p };
    // SAFETY: forwarded contract.
    unsafe { drive(tiles, bias, y, s, panels, act) }
}

/// A register-tile kernel on one layout of panels and inputs: what [`drive`] runs for
/// each tile. The f32 panels here, and bf16 products' pairs (`super::bf16_products`).
pub(super) trait Tiles: Copy {
    /// The sums of rows `b..b+NR` of panels `panel..panel+NP`, the features taken `SPLIT`
    /// at a time into separate accumulators.
    ///
    /// # Safety
    /// `b + NR <= s.rows`, `panel + NP` panels exist, and the caller runs with the
    /// instructions the kernel needs (it is inlined into an entry point that enables them).
    unsafe fn sums<const NR: usize, const NP: usize, const SPLIT: usize>(
        self,
        s: Shape,
        panel: usize,
        b: usize,
    ) -> [[[__m512; NP]; NR]; SPLIT];
}

/// Covers rows × `panels` with tiles of `tiles`, row block by row block and two panels at a
/// time, then adds the biases, applies `act` and stores each tile.
///
/// # Safety
/// As [`super::dense`], with the buffers `tiles` reads; the caller enables AVX-512 F and
/// what `tiles` needs, and this is inlined into it.
#[inline(always)]
pub(super) unsafe fn drive<T: Tiles>(
    tiles: T,
    bias: &[f32],
    y: *mut f32,
    s: Shape,
    panels: Range<usize>,
    act: Activation,
) {
    let out = Out { bias, y, s, act };
    let mut block = 0;
    while block < s.rows {
        let block_rows = ROW_BLOCK.min(s.rows - block);
        let mut panel = panels.start;
        while panel < panels.end {
            let pair = panel + 2 <= panels.end;
            let mut b = block;
            let mut left = block_rows;
            while left > 0 {
                let rows = tile_rows(left);
                // SAFETY: b + rows <= s.rows and panel (+ 1 for a pair) < panels.end, per
                // the contract.
                unsafe {
                    match pair {
                        true => tile_pair(tiles, rows, &out, panel, b),
                        false => tile_one(tiles, rows, &out, panel, b),
                    }
                }
                b += rows;
                left -= rows;
            }
            panel += if pair { 2 } else { 1 };
        }
        block += block_rows;
    }
}

/// Where a tile's results go, and what the epilogue applies.
struct Out<'a> {
    bias: &'a [f32],
    y: *mut f32,
    s: Shape,
    act: Activation,
}

/// Two panels of `rows` rows. Fewer than four rows split the features over more
/// accumulator sets, so that every tile has at least eight independent chains (two units,
/// four cycles each).
#[inline(always)]
unsafe fn tile_pair<T: Tiles>(tiles: T, rows: usize, out: &Out<'_>, panel: usize, b: usize) {
    // SAFETY: forwarded contract.
    unsafe {
        match rows {
            8 => tile::<T, 8, 2, 1>(tiles, out, panel, b),
            7 => tile::<T, 7, 2, 1>(tiles, out, panel, b),
            6 => tile::<T, 6, 2, 1>(tiles, out, panel, b),
            5 => tile::<T, 5, 2, 1>(tiles, out, panel, b),
            4 => tile::<T, 4, 2, 1>(tiles, out, panel, b),
            3 => tile::<T, 3, 2, 2>(tiles, out, panel, b),
            2 => tile::<T, 2, 2, 3>(tiles, out, panel, b),
            _ => tile::<T, 1, 2, 6>(tiles, out, panel, b),
        }
    }
}

/// The last panel of an odd range, alone.
#[inline(always)]
unsafe fn tile_one<T: Tiles>(tiles: T, rows: usize, out: &Out<'_>, panel: usize, b: usize) {
    // SAFETY: forwarded contract.
    unsafe {
        match rows {
            8 => tile::<T, 8, 1, 1>(tiles, out, panel, b),
            7 => tile::<T, 7, 1, 2>(tiles, out, panel, b),
            6 => tile::<T, 6, 1, 2>(tiles, out, panel, b),
            5 => tile::<T, 5, 1, 2>(tiles, out, panel, b),
            4 => tile::<T, 4, 1, 2>(tiles, out, panel, b),
            3 => tile::<T, 3, 1, 3>(tiles, out, panel, b),
            2 => tile::<T, 2, 1, 4>(tiles, out, panel, b),
            _ => tile::<T, 1, 1, 8>(tiles, out, panel, b),
        }
    }
}

/// One register tile: its sums, then the epilogue.
#[inline(always)]
unsafe fn tile<T: Tiles, const NR: usize, const NP: usize, const SPLIT: usize>(
    tiles: T,
    out: &Out<'_>,
    panel: usize,
    b: usize,
) {
    // SAFETY: forwarded contract.
    unsafe {
        let acc = tiles.sums::<NR, NP, SPLIT>(out.s, panel, b);
        store::<NR, NP, SPLIT>(&acc, out.bias, out.y, out.s, panel, b, out.act);
    }
}

/// f32 inputs against panels of weights in `F`'s format.
struct Panels<'a, F: Format> {
    x: &'a [f32],
    p: &'a [F::Bits],
}

impl<F: Format> Clone for Panels<'_, F> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<F: Format> Copy for Panels<'_, F> {}

impl<F: Format> Tiles for Panels<'_, F> {
    #[inline(always)]
    unsafe fn sums<const NR: usize, const NP: usize, const SPLIT: usize>(
        self,
        s: Shape,
        panel: usize,
        b: usize,
    ) -> [[[__m512; NP]; NR]; SPLIT] {
        let (x, p, k) = (self.x, self.p, s.k);
        // SAFETY (whole block): x is read below (b + NR) * k and the panels' values below
        // (panel + NP) * k * PANEL, within the caller's contract; the panels start on a cache
        // line and their rows are PANEL values wide, so every row of a panel starts on 32
        // bytes (64 for f32), as `Format::load16` needs.
        unsafe {
            let xp = x.as_ptr();
            let weights = |kk: usize, q: usize| {
                F::load16(p.as_ptr().add((panel + q) * k * PANEL + kk * PANEL))
            };
            let mut acc = [[[_mm512_setzero_ps(); NP]; NR]; SPLIT];
            let whole = k / SPLIT * SPLIT;
            let mut kk = 0;
            while kk < whole {
                for (u, acc) in acc.iter_mut().enumerate() {
                    let mut w = [_mm512_setzero_ps(); NP];
                    for (q, w) in w.iter_mut().enumerate() {
                        *w = weights(kk + u, q);
                    }
                    for (r, acc) in acc.iter_mut().enumerate() {
                        let v = _mm512_set1_ps(*xp.add((b + r) * k + kk + u));
                        for (acc, w) in acc.iter_mut().zip(&w) {
                            *acc = _mm512_fmadd_ps(v, *w, *acc);
                        }
                    }
                }
                kk += SPLIT;
            }
            while kk < k {
                for (r, acc) in acc[0].iter_mut().enumerate() {
                    let v = _mm512_set1_ps(*xp.add((b + r) * k + kk));
                    for (q, acc) in acc.iter_mut().enumerate() {
                        *acc = _mm512_fmadd_ps(v, weights(kk, q), *acc);
                    }
                }
                kk += 1;
            }
            acc
        }
    }
}

/// The tile's epilogue: sums the split accumulators, adds the biases, applies the
/// activation and stores rows `b..b+NR` of panels `panel..panel+NP`, masked to the real
/// columns of a last, partial panel.
#[inline(always)]
unsafe fn store<const NR: usize, const NP: usize, const SPLIT: usize>(
    acc: &[[[__m512; NP]; NR]; SPLIT],
    bias: &[f32],
    y: *mut f32,
    s: Shape,
    panel: usize,
    b: usize,
    act: Activation,
) {
    // SAFETY (whole block): the biases are read below (panel + NP) * PANEL (they are
    // padded to whole panels) and y is written below (b + NR) * n at columns < n, within
    // `tile`'s contract.
    unsafe {
        for q in 0..NP {
            let o = (panel + q) * PANEL;
            let mask = columns(s.n, o);
            for r in 0..NR {
                let mut v = _mm512_loadu_ps(bias.as_ptr().add(o));
                for acc in acc {
                    v = _mm512_add_ps(v, acc[r][q]);
                }
                _mm512_mask_storeu_ps(y.add((b + r) * s.n + o), mask, activate(v, act));
            }
        }
    }
}

/// Columns `o..o + PANEL` of one output row: the bias plus `sum`, the activation, stored
/// masked to the `n` real columns.
///
/// # Safety
/// `bias` holds `o + PANEL` values; `row` points to `n` writable values, `o < n`; the CPU has
/// AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn finish_row(
    sum: __m512,
    bias: &[f32],
    row: *mut f32,
    n: usize,
    o: usize,
    act: Activation,
) {
    // SAFETY: the contract.
    unsafe {
        let v = _mm512_add_ps(_mm512_loadu_ps(bias.as_ptr().add(o)), sum);
        _mm512_mask_storeu_ps(row.add(o), columns(n, o), activate(v, act));
    }
}

/// The lanes of a panel from column `o` that are real columns of `n`.
#[inline(always)]
fn columns(n: usize, o: usize) -> __mmask16 {
    match (n - o).min(PANEL) {
        PANEL => 0xFFFF,
        valid => (1u16 << valid) - 1,
    }
}

/// The epilogue's activation of 16 outputs.
///
/// # Safety
/// The CPU has AVX-512 F.
#[inline]
#[target_feature(enable = "avx512f")]
unsafe fn activate(v: __m512, act: Activation) -> __m512 {
    // SAFETY: the CPU has AVX-512 F (the contract).
    unsafe {
        match act {
            Activation::Identity => v,
            Activation::Relu => _mm512_max_ps(v, _mm512_setzero_ps()),
            Activation::Gelu => crate::cpu::vmath::avx512::gelu(v),
        }
    }
}
