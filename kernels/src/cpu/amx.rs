//! Intel's AMX tiles (Sapphire Rapids and later), as the dense layers and attention use them:
//! one `tdpbf16ps` multiplies a 16 × 32 block of bf16 values by a 32 × 16 one into a 16 × 16
//! block of f32 sums, 8,192 multiply-adds an instruction.
//!
//! Both take the same step: [`Product`], 32 rows of a row-major bf16 matrix times one or two
//! *panels* of 16 columns, each stored by pairs of rows (`[k/2][16][2]`, the layout
//! `tdpbf16ps` takes its second operand in: one tile is 16 pairs × 16 columns, 1,024
//! contiguous bytes), into 32 × 16 or 32 × 32 f32 sums. It keeps them in tiles 0–3, its rows
//! in 4–5 and its panels in 6–7, so each tile loaded serves two products.
//!
//! Linux lends the tiles' state to a process only when it asks (`arch_prctl`), once; a
//! thread configures its tiles ([`Tiles::configure`]) for a run of products and releases
//! them after. Nothing else in the program touches the tiles (the compiler emits no AMX
//! instruction of its own), so the configuration holds between products.

use std::arch::asm;
use std::arch::x86_64::{__cpuid, __cpuid_count};
use std::marker::PhantomData;
use std::sync::OnceLock;

/// Rows per product: two tiles of 16.
pub(crate) const ROWS: usize = 32;
/// Values along the shared dimension per step: 16 pairs.
pub(crate) const STEP: usize = 32;
/// Columns per panel: one tile's.
pub(crate) const PANEL: usize = 16;
// The asm steps 64 bytes along a row and 1,024 along a panel per tile.
const _: () = assert!(STEP * 2 == 64 && STEP * PANEL * 2 == 1024);

/// Whether this CPU has AMX with bf16 and the kernel gave this process its tiles (asked once).
pub(crate) fn available() -> bool {
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

/// This thread's tiles, configured for [`Product`]s until dropped. A caller holding one
/// must not run other work on the thread that could configure or release the tiles (a
/// rayon job taken while waiting, say) before dropping it.
/// Not `Send`: the configuration belongs to the thread that made it.
pub(crate) struct Tiles(PhantomData<*const ()>);

impl Tiles {
    /// # Safety
    /// [`available`] is true.
    pub(crate) unsafe fn configure() -> Tiles {
        // SAFETY: the CPU has AMX and the process its tiles (the contract).
        unsafe { asm!("ldtilecfg [{}]", in(reg) &CONFIG, options(nostack, readonly)) };
        Tiles(PhantomData)
    }
}

impl Drop for Tiles {
    fn drop(&mut self) {
        // SAFETY: the tiles were configured in `configure`.
        unsafe { asm!("tilerelease", options(nostack, nomem)) };
    }
}

/// `c[32][16 · panels] = a[32][STEP · steps] × panels`, sums in f32, overwriting `c` or
/// added to it ([`Self::accumulate`]). Strides are in values.
#[derive(Clone, Copy)]
pub(crate) struct Product {
    /// The first of 32 rows of bf16 values, `lda` apart.
    pub a: *const u16,
    pub lda: usize,
    /// The first panel, `[STEP · steps / 2][16][2]` bf16 values; a second one `panel`
    /// values after it.
    pub b: *const u16,
    pub panel: usize,
    /// Steps of [`STEP`] along the shared dimension (0 gives zeros).
    pub steps: usize,
    /// The first of 32 rows of f32 sums, `ldc` apart.
    pub c: *mut f32,
    pub ldc: usize,
    /// Whether the product is added to the sums `c` holds, rather than overwriting them.
    pub accumulate: bool,
}

impl Product {
    /// Sums against two panels: `c`'s columns 0–31.
    ///
    /// # Safety
    /// A [`Tiles`] is held on this thread; `a` reads 32 rows of `STEP · steps` values, the
    /// panels `STEP · steps · PANEL` values each, and `c` takes 32 rows of 32 values (and
    /// holds them already where the product accumulates), all inside their buffers.
    #[inline(always)]
    pub(crate) unsafe fn two_panels(self) {
        // SAFETY: every tile load reads 16 rows of 64 bytes inside the rows (from a, lda
        // apart, 32 rows) or a panel (1,024 contiguous bytes a step); the stores write, and
        // an accumulating product's first loads read, 16 rows of 64 bytes of c's 32 rows ×
        // 32 values. The caller's contract.
        unsafe {
            asm!(
                "test {add:e}, {add:e}",
                "jz 4f",
                "tileloadd tmm0, [{c} + {sc}*1]",
                "tileloadd tmm1, [{c} + {sc}*1 + 64]",
                "tileloadd tmm2, [{c2} + {sc}*1]",
                "tileloadd tmm3, [{c2} + {sc}*1 + 64]",
                "jmp 5f",
                "4:",
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                "5:",
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
                "tilestored [{c} + {sc}*1 + 64], tmm1",
                "tilestored [{c2} + {sc}*1], tmm2",
                "tilestored [{c2} + {sc}*1 + 64], tmm3",
                a = inout(reg) self.a => _,
                a2 = inout(reg) self.a.wrapping_add(16 * self.lda) => _,
                w = inout(reg) self.b => _,
                w2 = inout(reg) self.b.wrapping_add(self.panel) => _,
                n = inout(reg) self.steps => _,
                add = in(reg) self.accumulate as u32,
                sa = in(reg) self.lda * 2,
                sw = in(reg) 64usize,
                c = in(reg) self.c,
                c2 = in(reg) self.c.wrapping_add(16 * self.ldc),
                sc = in(reg) self.ldc * 4,
                out("tmm0") _, out("tmm1") _, out("tmm2") _, out("tmm3") _,
                out("tmm4") _, out("tmm5") _, out("tmm6") _, out("tmm7") _,
                options(nostack)
            );
        }
    }

    /// Sums against the first panel only: `c`'s columns 0–15.
    ///
    /// # Safety
    /// As [`Self::two_panels`], with one panel and 16 values a row of `c`.
    #[inline(always)]
    pub(crate) unsafe fn one_panel(self) {
        // SAFETY: as in `two_panels`, without the second panel and its sums.
        unsafe {
            asm!(
                "test {add:e}, {add:e}",
                "jz 4f",
                "tileloadd tmm0, [{c} + {sc}*1]",
                "tileloadd tmm2, [{c2} + {sc}*1]",
                "jmp 5f",
                "4:",
                "tilezero tmm0",
                "tilezero tmm2",
                "5:",
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
                "tilestored [{c2} + {sc}*1], tmm2",
                a = inout(reg) self.a => _,
                a2 = inout(reg) self.a.wrapping_add(16 * self.lda) => _,
                w = inout(reg) self.b => _,
                n = inout(reg) self.steps => _,
                add = in(reg) self.accumulate as u32,
                sa = in(reg) self.lda * 2,
                sw = in(reg) 64usize,
                c = in(reg) self.c,
                c2 = in(reg) self.c.wrapping_add(16 * self.ldc),
                sc = in(reg) self.ldc * 4,
                out("tmm0") _, out("tmm2") _, out("tmm4") _, out("tmm5") _, out("tmm6") _,
                options(nostack)
            );
        }
    }
}
