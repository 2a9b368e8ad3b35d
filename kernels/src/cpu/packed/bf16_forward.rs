//! The bf16 products' side of [`PackedLinear`]: its weights rounded into pairs, and its
//! forward pass, which rounds the inputs once and runs AMX's tiles where the CPU has them,
//! else the AVX-512 BF16 kernel.

use super::{Aligned, HostWeights, PackedLinear, Panels, Shape};
#[cfg(target_arch = "x86_64")]
use super::{OutPtr, PANEL, PIECES_PER_THREAD, amx, bf16_products, in_parallel};
use crate::{Activation, KernelError};

impl PackedLinear {
    /// `forward` with bf16 products, on AMX's tiles where the CPU has them.
    #[cfg(target_arch = "x86_64")]
    pub(super) fn forward_bf16(
        &self,
        p: &Aligned<u16>,
        x: &[f32],
        y: &mut [f32],
        shape: Shape,
        act: Activation,
        threads: usize,
    ) -> Result<(), KernelError> {
        // Where the CPU has AMX its tiles run every batch: a block of 32 rows costs the same
        // however few are real, and still beats the AVX-512 BF16 kernel's tiles at one row
        // (`encoder_bench::dense_kernel_choice_one_core`).
        self.bf16_products(p, x, y, shape, act, threads, amx::available())
    }

    /// bf16 products on AMX's tiles (`tiles`, only where [`amx::available`]) or AVX-512
    /// BF16's: the inputs are rounded once, split by rows over the threads, into a buffer the
    /// calling thread keeps for its next layer (as large as the largest layer input it has
    /// rounded, half that input's bytes; a replica's threads end with it); then the panels
    /// are split as in `forward`.
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
        tiles: bool,
    ) -> Result<(), KernelError> {
        thread_local! {
            static ROUNDED: std::cell::Cell<Aligned<u16>> = Default::default();
        }
        // Taken rather than borrowed: a thread that waits in `in_parallel` may run another
        // layer's piece meanwhile, which then rounds into a buffer of its own.
        let mut rounded = ROUNDED.take();
        let kp = bf16_products::paired(shape.k);
        // AMX takes whole blocks of rows: the rows past the batch are zeros.
        let padded = match tiles {
            true => shape.rows.next_multiple_of(amx::BLOCK_ROWS),
            false => shape.rows,
        };
        rounded.resize_for_overwrite(padded * kp);
        rounded[shape.rows * kp..].fill(0);
        let into = OutPtr(rounded.as_mut_ptr());
        in_parallel(shape.rows, 1, threads, |rows| {
            let into = &into;
            // SAFETY: `rounded` holds rows * paired(k) values and x rows * k (checked in
            // `forward`); the row ranges are disjoint; the panels exist only where the CPU
            // has AVX-512 BF16 (`with_precision`).
            unsafe { bf16_products::round_rows(x, shape.k, rows, into.0) }
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
                match tiles {
                    true => amx::dense(&rounded, p, bias, out.0, shape, panels, act),
                    false => bf16_products::dense(&rounded, p, bias, out.0, shape, panels, act),
                }
            }
        });
        ROUNDED.set(rounded);
        Ok(())
    }

    #[cfg(not(target_arch = "x86_64"))]
    pub(super) fn forward_bf16(
        &self,
        _: &Aligned<u16>,
        _: &[f32],
        _: &mut [f32],
        _: Shape,
        _: Activation,
        _: usize,
    ) -> Result<(), KernelError> {
        unreachable!("bf16 panels are built only where the CPU has AVX-512 BF16")
    }
}

/// `weight` rounded to bf16 in [`bf16_products`]'s pair layout; only reached where `available`.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_variables))]
pub(super) fn pack_bf16_pairs(weight: HostWeights<'_>, inputs: usize, outputs: usize) -> Panels {
    #[cfg(target_arch = "x86_64")]
    {
        let value = |i: usize| match weight {
            HostWeights::F32(w) => w[i],
            HostWeights::F16(w) => w[i].to_f32(),
            HostWeights::BF16(w) => w[i].to_f32(),
        };
        Panels::Bf16Pairs(bf16_products::pack_pairs(value, inputs, outputs))
    }
    #[cfg(not(target_arch = "x86_64"))]
    unreachable!("bf16 products are refused where the CPU has no AVX-512 BF16")
}

/// Whether bf16 products run on AMX's tiles here.
pub(super) fn amx_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    return amx::available();
    #[cfg(not(target_arch = "x86_64"))]
    false
}
