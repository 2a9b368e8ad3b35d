//! bf16 products on Intel's AMX tiles (Sapphire Rapids and later): one `tdpbf16ps` multiplies
//! a 16 × 32 block of rounded inputs by 32 × 16 weights into a 16 × 16 block of f32 sums,
//! 8,192 multiply-adds an instruction. On those CPUs `vdpbf16ps` runs on one port where
//! f32 multiply-adds run on two, so the AVX-512 BF16 kernel ([`super::bf16_products`]) does
//! no more work a cycle than f32; the tiles do about eight times more.
//!
//! The operands are those of the AVX-512 BF16 kernel, as they are: a panel's weights by
//! pairs of input features, `[k/2][PANEL][2]`, are the layout `tdpbf16ps` takes its second
//! operand in (one tile: 16 pairs × 16 outputs, rows of 64 bytes), and the rounded input rows
//! (`paired(k)` values, a multiple of 32) give the first operand, 16 rows × 32 features. A
//! block of 32 rows × 2 panels keeps four sums in tiles 0–3, its inputs in 4–5 and its
//! weights in 6–7, so each tile loaded serves two products.
//!
//! Linux lends the tiles' state to a process only when it asks (`arch_prctl`), once; each
//! thread configures its tiles when it runs a layer and releases them after. Nothing else in
//! the program touches the tiles (the compiler emits no AMX instruction of its own), so the
//! configuration holds between a layer's blocks.

use std::arch::asm;
use std::arch::x86_64::*;
use std::ops::Range;
use std::sync::OnceLock;

use super::avx512::finish_row;
use super::{PANEL, Shape};
use crate::Activation;

/// Input rows per block: two tiles of 16. The rounded inputs are padded with zero rows to a
/// multiple of it.
pub(super) const BLOCK_ROWS: usize = 32;
/// Input features per tile: 16 pairs.
const TILE_K: usize = 32;
// The blocks' asm steps 64 bytes along an input row and 1,024 along a panel per tile.
const _: () = assert!(TILE_K * 2 == 64 && TILE_K * PANEL * 2 == 1024);
/// Rows whose blocks share one pass over a pair of panels, so that the panels stay in L2
/// while the rows' inputs pass: 128 rows of 3,072 features are 768 KB.
const ROW_GROUP: usize = 128;

/// Whether this CPU has AMX with bf16 and the kernel gave this process its tiles (asked once).
pub(super) fn available() -> bool {
    static GRANTED: OnceLock<bool> = OnceLock::new();
    *GRANTED.get_or_init(|| cpu_has_amx_bf16() && request_tiles())
}

/// CPUID leaf 7: AMX-BF16 is EDX bit 22, AMX-TILE bit 24.
fn cpu_has_amx_bf16() -> bool {
    // CPUID is available on every x86-64 CPU; leaf 7 exists where its maximum leaf
    // allows, checked first.
    if __cpuid(0).eax < 7 {
        return false;
    }
    let edx = __cpuid_count(7, 0).edx;
    edx & (1 << 22) != 0 && edx & (1 << 24) != 0
}

/// Asks Linux for the tiles' state (`ARCH_REQ_XCOMP_PERM` for `XFEATURE_XTILEDATA`).
fn request_tiles() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: the call takes two integers and changes only this process's permissions.
    unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) == 0
    }
}

/// The tiles' shapes (`ldtilecfg`'s 64-byte operand, palette 1): every one of the eight is
/// 16 rows of 64 bytes.
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

const CONFIG: TileConfig = TileConfig {
    palette: 1,
    start_row: 0,
    reserved: [0; 14],
    colsb: [64, 64, 64, 64, 64, 64, 64, 64, 0, 0, 0, 0, 0, 0, 0, 0],
    rows: [16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0],
};

/// Computes the outputs of `panels` for every row, from inputs rounded by
/// `bf16_products::round_rows` and padded with zero rows to a multiple of [`BLOCK_ROWS`].
///
/// # Safety
/// `x` holds `s.rows.next_multiple_of(BLOCK_ROWS) * paired(k)` values, with `paired(k)` a
/// multiple of 32; `p` holds `[panels.end][paired(k)][PANEL]` values; `bias` `panels.end *
/// PANEL`; `y` points to `s.rows * s.n` writable values with `(panels.end - 1) * PANEL <
/// s.n`. No other thread writes those panels' columns of `y`. [`available`] is true.
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn dense(
    x: &[u16],
    p: &[u16],
    bias: &[f32],
    y: *mut f32,
    s: Shape,
    panels: Range<usize>,
    act: Activation,
) {
    let kp = super::bf16_products::paired(s.k);
    debug_assert!(kp.is_multiple_of(TILE_K));
    let padded = s.rows.next_multiple_of(BLOCK_ROWS);
    // SAFETY: the CPU has AMX and the process its tiles (the contract).
    unsafe { asm!("ldtilecfg [{}]", in(reg) &CONFIG, options(nostack, readonly)) };
    let mut group = 0;
    while group < padded {
        let group_end = (group + ROW_GROUP).min(padded);
        let mut panel = panels.start;
        while panel < panels.end {
            let two = panel + 2 <= panels.end;
            for b in (group..group_end).step_by(BLOCK_ROWS) {
                let block = Block { x, p, kp, panel, b };
                // SAFETY: rows b..b + 32 of x and panels panel (..panel + 2) of p exist per
                // the contract; the sums go to y's rows below s.rows only.
                unsafe {
                    let sums = block.sums(two);
                    finish(&sums, two, bias, y, s, panel, b, act);
                }
            }
            panel += if two { 2 } else { 1 };
        }
        group = group_end;
    }
    // SAFETY: the tiles were configured above.
    unsafe { asm!("tilerelease", options(nostack, nomem)) };
}

/// 32 input rows from row `b` against one or two panels from `panel`.
struct Block<'a> {
    x: &'a [u16],
    p: &'a [u16],
    kp: usize,
    panel: usize,
    b: usize,
}

/// A block's sums, `[row tile][panel][16 rows × 16 outputs]`, stored from tiles 0–3.
#[repr(C, align(64))]
struct Sums([[[f32; 256]; 2]; 2]);

impl Block<'_> {
    /// Tile 0: rows 0–15 × the first panel, 1: × the second; 2 and 3: rows 16–31. Each
    /// block's products run in one `asm!` that zeroes, fills and stores the sum tiles, so no
    /// tile's value is expected to outlive a block (the tiles are clobbers of each).
    ///
    /// # Safety
    /// The tiles are configured ([`CONFIG`]); the block's rows and panels exist.
    unsafe fn sums(&self, two: bool) -> Sums {
        let mut sums = Sums([[[0.0; 256]; 2]; 2]);
        let a = self.x.as_ptr().wrapping_add(self.b * self.kp);
        let w = self.p.as_ptr().wrapping_add(self.panel * self.kp * PANEL);
        let steps = self.kp / TILE_K;
        // SAFETY: every tile load reads 16 rows of 64 bytes inside the block's rows (from a,
        // a row every kp values, 32 rows) and panels (from w, 64-byte rows, one or two
        // panels of kp * PANEL values); the stores write `sums`, four tiles of 16 rows of 64
        // bytes, 1,024 bytes apart.
        unsafe {
            match two {
                true => two_panels(a, w, self.kp, steps, &mut sums),
                false => one_panel(a, w, self.kp, steps, &mut sums),
            }
        }
        sums
    }
}

/// Rows `a..` (two tiles) × two panels from `w`, `steps` tiles of 32 features.
///
/// # Safety
/// As [`Block::sums`].
#[inline(always)]
unsafe fn two_panels(a: *const u16, w: *const u16, kp: usize, steps: usize, sums: &mut Sums) {
    // SAFETY: the caller's.
    unsafe {
        asm!(
            "tilezero tmm0",
            "tilezero tmm1",
            "tilezero tmm2",
            "tilezero tmm3",
            "test {n}, {n}",
            "jz 3f",
            "2:",
            "tileloadd tmm4, [{a} + {sa}*1]",
            "tileloadd tmm5, [{a2} + {sa}*1]",
            "tileloadd tmm6, [{w} + {sw}*1]",
            "tileloadd tmm7, [{w2} + {sw}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm1, tmm4, tmm7",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "tdpbf16ps tmm3, tmm5, tmm7",
            "add {a}, 64",
            "add {a2}, 64",
            "add {w}, 1024",
            "add {w2}, 1024",
            "dec {n}",
            "jnz 2b",
            "3:",
            "tilestored [{c} + {sc}*1], tmm0",
            "tilestored [{c} + {sc}*1 + 1024], tmm1",
            "tilestored [{c} + {sc}*1 + 2048], tmm2",
            "tilestored [{c} + {sc}*1 + 3072], tmm3",
            a = inout(reg) a => _,
            a2 = inout(reg) a.add(16 * kp) => _,
            w = inout(reg) w => _,
            w2 = inout(reg) w.add(kp * PANEL) => _,
            n = inout(reg) steps => _,
            sa = in(reg) kp * 2,
            sw = in(reg) 2 * PANEL * 2,
            c = in(reg) sums.0.as_mut_ptr(),
            sc = in(reg) 64usize,
            out("tmm0") _, out("tmm1") _, out("tmm2") _, out("tmm3") _,
            out("tmm4") _, out("tmm5") _, out("tmm6") _, out("tmm7") _,
            options(nostack)
        );
    }
}

/// Rows `a..` (two tiles) × the one panel at `w`: tiles 0 and 2 of `sums`.
///
/// # Safety
/// As [`Block::sums`].
#[inline(always)]
unsafe fn one_panel(a: *const u16, w: *const u16, kp: usize, steps: usize, sums: &mut Sums) {
    // SAFETY: the caller's.
    unsafe {
        asm!(
            "tilezero tmm0",
            "tilezero tmm2",
            "test {n}, {n}",
            "jz 3f",
            "2:",
            "tileloadd tmm4, [{a} + {sa}*1]",
            "tileloadd tmm5, [{a2} + {sa}*1]",
            "tileloadd tmm6, [{w} + {sw}*1]",
            "tdpbf16ps tmm0, tmm4, tmm6",
            "tdpbf16ps tmm2, tmm5, tmm6",
            "add {a}, 64",
            "add {a2}, 64",
            "add {w}, 1024",
            "dec {n}",
            "jnz 2b",
            "3:",
            "tilestored [{c} + {sc}*1], tmm0",
            "tilestored [{c} + {sc}*1 + 2048], tmm2",
            a = inout(reg) a => _,
            a2 = inout(reg) a.add(16 * kp) => _,
            w = inout(reg) w => _,
            n = inout(reg) steps => _,
            sa = in(reg) kp * 2,
            sw = in(reg) 2 * PANEL * 2,
            c = in(reg) sums.0.as_mut_ptr(),
            sc = in(reg) 64usize,
            out("tmm0") _, out("tmm2") _, out("tmm4") _, out("tmm5") _, out("tmm6") _,
            options(nostack)
        );
    }
}

/// The block's epilogue: bias, activation, and the real rows and columns into `y`.
///
/// # Safety
/// As [`dense`]'s contract, for the block's rows and panels.
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
        for r in 0..rows {
            let tile = &sums.0[r / 16][q];
            // SAFETY: the row is inside the tile; y's row b + r < s.rows and columns o.. of
            // panel panel + q, within the contract (`finish_row` masks past s.n).
            unsafe {
                let v = _mm512_load_ps(tile.as_ptr().add((r % 16) * 16));
                finish_row(v, bias, y.add((b + r) * s.n), s.n, o, act);
            }
        }
    }
}
