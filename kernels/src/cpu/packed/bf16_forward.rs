//! The bf16 products' side of [`PackedLinear`]: its weights rounded (or split, for bf16x3)
//! into pairs, and its forward pass, which rounds or splits the inputs once and runs AMX's
//! tiles where the CPU has them, else the AVX-512 BF16 kernel.

#[cfg(target_arch = "x86_64")]
use super::amx::Layout::{Rounded, Split};
use super::{Aligned, HostWeights, MatmulPrecision, PackedLinear, Panels, Shape};
#[cfg(target_arch = "x86_64")]
use super::{OutPtr, PANEL, PIECES_PER_THREAD, amx, bf16_products, bf16x3, in_parallel};
use crate::{Activation, KernelError};

impl PackedLinear {
    /// `forward` where the panels are pairs for bf16 or bf16x3 products; `None` for the
    /// others. bf16 products run on AMX's tiles where the CPU has them, else AVX-512 BF16's;
    /// bf16x3 products on the tiles, or below [`bf16x3::TILE_ROWS`] rows f32 products with
    /// the recombined weights.
    #[cfg(target_arch = "x86_64")]
    pub(super) fn forward_pairs(
        &self,
        x: &[f32],
        y: &mut [f32],
        shape: Shape,
        act: Activation,
        threads: usize,
    ) -> Option<Result<(), KernelError>> {
        let (p, kernel) = match &self.panels {
            // Where the CPU has AMX its tiles run every batch: a block of 32 rows costs the
            // same however few are real, and still beats the AVX-512 BF16 kernel's tiles at
            // one row (`encoder_bench::dense_kernel_choice_one_core`).
            Panels::Bf16Pairs(p) if amx::available() => (p, Bf16Kernel::Tiles),
            Panels::Bf16Pairs(p) => (p, Bf16Kernel::Avx512),
            Panels::Bf16x3Pairs(p) if shape.rows >= bf16x3::TILE_ROWS => {
                (p, Bf16Kernel::SplitTiles)
            }
            Panels::Bf16x3Pairs(p) => return Some(self.recombined(p, x, y, shape, act, threads)),
            _ => return None,
        };
        Some(self.bf16_products(p, x, y, shape, act, threads, kernel))
    }

    /// No panels of pairs are built here.
    #[cfg(not(target_arch = "x86_64"))]
    pub(super) fn forward_pairs(
        &self,
        _: &[f32],
        _: &mut [f32],
        _: Shape,
        _: Activation,
        _: usize,
    ) -> Option<Result<(), KernelError>> {
        None
    }

    /// f32 products with the recombined weights of bf16x3's panels `p`, for a few rows.
    #[cfg(target_arch = "x86_64")]
    fn recombined(
        &self,
        p: &Aligned<u16>,
        x: &[f32],
        y: &mut [f32],
        shape: Shape,
        act: Activation,
        threads: usize,
    ) -> Result<(), KernelError> {
        let out = OutPtr(y.as_mut_ptr());
        let pieces = threads * PIECES_PER_THREAD;
        in_parallel(self.outputs.div_ceil(PANEL), 1, pieces, |panels| {
            let (out, bias) = (&out, &self.bias);
            // SAFETY: as in `forward`; the split panels exist only where the CPU has AMX and
            // AVX-512 (`with_precision`).
            unsafe { bf16x3::dense_few_rows(x, p, bias, out.0, shape, panels, act) }
        });
        Ok(())
    }

    /// bf16 products on `kernel` (the tiles only where [`amx::available`]): the inputs are
    /// rounded (or split) once, divided by rows over the threads, into a buffer the calling
    /// thread keeps for its next layer (as large as the largest layer input it has rounded,
    /// half that input's bytes, or as many split; a replica's threads end with it);
    /// then the panels are divided as in `forward`.
    #[cfg(target_arch = "x86_64")]
    #[allow(clippy::too_many_arguments)]
    pub(super) fn bf16_products(
        &self,
        p: &Aligned<u16>,
        x: &[f32],
        y: &mut [f32],
        shape: Shape,
        act: Activation,
        threads: usize,
        kernel: Bf16Kernel,
    ) -> Result<(), KernelError> {
        thread_local! {
            static ROUNDED: std::cell::Cell<Aligned<u16>> = Default::default();
        }
        // Taken rather than borrowed: a thread that waits in `in_parallel` may run another
        // layer's piece meanwhile, which then rounds into a buffer of its own.
        let mut rounded = ROUNDED.take();
        let tiles = kernel != Bf16Kernel::Avx512;
        let row = match kernel {
            Bf16Kernel::SplitTiles => bf16x3::width(shape.k),
            _ => bf16_products::paired(shape.k),
        };
        // AMX takes whole blocks of rows: the rows past the batch are zeros.
        let padded = match tiles {
            true => shape.rows.next_multiple_of(amx::BLOCK_ROWS),
            false => shape.rows,
        };
        rounded.resize_for_overwrite(padded * row);
        rounded[shape.rows * row..].fill(0);
        let into = OutPtr(rounded.as_mut_ptr());
        in_parallel(shape.rows, 1, threads, |rows| {
            let into = &into;
            // SAFETY: `rounded` holds rows * row values and x rows * k (checked in `forward`);
            // the row ranges are disjoint; the panels exist only where the CPU has AVX-512
            // BF16 (`with_precision`).
            unsafe {
                match kernel {
                    Bf16Kernel::SplitTiles => bf16x3::split_rows(x, shape.k, rows, into.0),
                    _ => bf16_products::round_rows(x, shape.k, rows, into.0),
                }
            }
        });
        let out = OutPtr(y.as_mut_ptr());
        let pieces = threads * PIECES_PER_THREAD;
        // AMX's blocks take panels by twos.
        let granule = if tiles { 2 } else { 1 };
        in_parallel(self.outputs.div_ceil(PANEL), granule, pieces, |panels| {
            let (out, bias) = (&out, &self.bias);
            // SAFETY: as in `forward`, with the rounded rows (padded to AMX's blocks where
            // its tiles run, which `amx::available` says) for x.
            unsafe {
                let x = &rounded;
                match kernel {
                    Bf16Kernel::Tiles => amx::dense(x, p, bias, out.0, shape, panels, act, Rounded),
                    Bf16Kernel::SplitTiles => {
                        amx::dense(x, p, bias, out.0, shape, panels, act, Split)
                    }
                    Bf16Kernel::Avx512 => {
                        bf16_products::dense(x, p, bias, out.0, shape, panels, act)
                    }
                }
            }
        });
        ROUNDED.set(rounded);
        Ok(())
    }
}

/// Which kernel runs bf16 products, on which operands.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Bf16Kernel {
    /// AVX-512 BF16's `vdpbf16ps`, on rounded operands.
    Avx512,
    /// AMX's tiles, on rounded operands.
    Tiles,
    /// AMX's tiles, on split operands (bf16x3).
    SplitTiles,
}

/// `weight` as `precision`'s panels of pairs: rounded to bf16 ([`bf16_products::pack_pairs`])
/// or split for bf16x3 ([`bf16x3::pack`]); only reached where `precision.available()`.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
pub(super) fn pack_pairs(
    precision: MatmulPrecision,
    weight: HostWeights<'_>,
    inputs: usize,
    outputs: usize,
) -> Panels {
    #[cfg(target_arch = "x86_64")]
    {
        let value = |i: usize| match weight {
            HostWeights::F32(w) => w[i],
            HostWeights::F16(w) => w[i].to_f32(),
            HostWeights::BF16(w) => w[i].to_f32(),
        };
        match precision {
            MatmulPrecision::Bf16x3 => Panels::Bf16x3Pairs(bf16x3::pack(value, inputs, outputs)),
            _ => Panels::Bf16Pairs(bf16_products::pack_pairs(value, inputs, outputs)),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("bf16 and bf16x3 products are refused where the CPU has no kernel for them")
}

/// Whether bf16 products run on AMX's tiles here.
pub(super) fn amx_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    return amx::available();
    #[cfg(not(target_arch = "x86_64"))]
    false
}
