//! Dense layers with bf16 products on AMX's tiles ([`crate::cpu::amx`]). On those CPUs
//! `vdpbf16ps` runs on one port where f32 multiply-adds run on two, so the AVX-512 BF16
//! kernel ([`super::bf16_products`]) does no more work a cycle than f32; the tiles do about
//! eight times more.
//!
//! The operands are those of the AVX-512 BF16 kernel, as they are: a panel's weights by
//! pairs of input features, `[k/2][PANEL][2]`, are the layout the tiles take their second
//! operand in, and the rounded input rows (`paired(k)` values, a multiple of 32) give the
//! first. A block is 32 rows × 2 panels, one [`Product`]; with bf16x3's split operands
//! ([`Layout::Split`]), two.

use std::arch::x86_64::*;
use std::mem::MaybeUninit;
use std::ops::Range;

use super::avx512::finish_row;
use super::{PANEL, Shape};
use crate::Activation;
use crate::cpu::amx::{self, Product, Tiles};

/// Input rows per block. The rounded inputs are padded with zero rows to a multiple of it.
pub(super) const BLOCK_ROWS: usize = amx::ROWS;
const _: () = assert!(PANEL == amx::PANEL);
/// Rows whose blocks share one pass over a pair of panels, so that the panels stay in L2
/// while the rows' inputs pass: 128 rows of 3,072 features are 768 KB.
const ROW_GROUP: usize = 128;

/// What a row of the inputs and a panel of the weights hold, for `kp = paired(k)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Layout {
    /// Rows of `kp` rounded inputs; panels of `kp` pairs' rows of rounded weights.
    Rounded,
    /// bf16x3's (`super::bf16x3`): rows `[lo(x), hi(x)]` and panels `[hi(w); lo(w)]`, of
    /// `2 · kp`. One product over both parts gives `lo·hi + hi·lo`, and a second of `hi(x)`
    /// by `hi(w)` is added to it.
    Split,
}

/// Whether this CPU has AMX with bf16 and the kernel gave this process its tiles.
pub(super) fn available() -> bool {
    amx::available()
}

/// Computes the outputs of `panels` for every row, from inputs rounded by
/// `bf16_products::round_rows` (or split by `bf16x3::split_rows`, as `layout` says) and
/// padded with zero rows to a multiple of [`BLOCK_ROWS`].
///
/// # Safety
/// With `kp = paired(k)` (a multiple of 32) and the row and panel lengths of `layout`: `x`
/// holds `s.rows.next_multiple_of(BLOCK_ROWS)` rows; `p` holds `panels.end` panels times
/// `PANEL` values; `bias` `panels.end * PANEL`; `y` points to `s.rows * s.n` writable values
/// with `(panels.end - 1) * PANEL < s.n`. No other thread writes those panels' columns of
/// `y`. [`available`] is true.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn dense(
    x: &[u16],
    p: &[u16],
    bias: &[f32],
    y: *mut f32,
    s: Shape,
    panels: Range<usize>,
    act: Activation,
    layout: Layout,
) {
    let kp = super::bf16_products::paired(s.k);
    debug_assert!(kp.is_multiple_of(amx::STEP));
    let (row, panel_len) = match layout {
        Layout::Rounded => (kp, kp),
        Layout::Split => (2 * kp, 2 * kp),
    };
    let padded = s.rows.next_multiple_of(BLOCK_ROWS);
    // SAFETY: the contract; nothing below runs other work on this thread.
    let _tiles = unsafe { Tiles::configure() };
    let mut sums = Sums::new();
    let mut group = 0;
    while group < padded {
        let group_end = (group + ROW_GROUP).min(padded);
        let mut panel = panels.start;
        while panel < panels.end {
            let two = panel + 2 <= panels.end;
            for b in (group..group_end).step_by(BLOCK_ROWS) {
                let product = Product {
                    a: x.as_ptr().wrapping_add(b * row),
                    lda: row,
                    b: p.as_ptr().wrapping_add(panel * panel_len * PANEL),
                    panel: panel_len * PANEL,
                    steps: panel_len / amx::STEP,
                    c: sums.0.as_mut_ptr().cast(),
                    ldc: 2 * PANEL,
                    accumulate: false,
                };
                // hi(x), the rows' last kp values, by hi(w), the panels' first kp.
                let high = Product {
                    a: product.a.wrapping_add(kp),
                    steps: kp / amx::STEP,
                    accumulate: true,
                    ..product
                };
                // SAFETY: rows b..b + 32 of x and panels panel (..panel + 2) of p exist per
                // the contract, and `sums` holds 32 × 32 values, written by the first product
                // before the second adds to them; the sums go to y's rows below s.rows only.
                unsafe {
                    let run = |product: Product| match two {
                        true => product.two_panels(),
                        false => product.one_panel(),
                    };
                    run(product);
                    if layout == Layout::Split {
                        run(high);
                    }
                    finish(&sums, two, bias, y, s, panel, b, act);
                }
            }
            panel += if two { 2 } else { 1 };
        }
        group = group_end;
    }
}

/// A block's sums, 32 rows × 2 panels, written by a block's first product before they are
/// read (by the epilogue, or by bf16x3's second product, which adds to them).
#[repr(C, align(64))]
struct Sums([[MaybeUninit<f32>; 2 * PANEL]; BLOCK_ROWS]);

impl Sums {
    fn new() -> Sums {
        Sums([[MaybeUninit::uninit(); 2 * PANEL]; BLOCK_ROWS])
    }
}

/// The block's epilogue: bias, activation, and the real rows and columns into `y`.
///
/// # Safety
/// As [`dense`]'s contract, for the block's rows and panels, whose sums the block's product
/// has written.
#[allow(clippy::too_many_arguments)]
#[target_feature(enable = "avx512f")]
unsafe fn finish(
    sums: &Sums,
    two: bool,
    bias: &[f32],
    y: *mut f32,
    s: Shape,
    panel: usize,
    b: usize,
    act: Activation,
) {
    let rows = s.rows.saturating_sub(b).min(BLOCK_ROWS);
    for q in 0..1 + two as usize {
        let o = (panel + q) * PANEL;
        for (r, sum) in sums.0.iter().enumerate().take(rows) {
            // SAFETY: the product wrote this row's 16 sums of panel q; y's row b + r < s.rows
            // and columns o.. of panel panel + q, within the contract (`finish_row` masks
            // past s.n).
            unsafe {
                let v = _mm512_load_ps(sum.as_ptr().add(q * PANEL).cast());
                finish_row(v, bias, y.add((b + r) * s.n), s.n, o, act);
            }
        }
    }
}
