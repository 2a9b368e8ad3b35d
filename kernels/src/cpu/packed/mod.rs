//! Dense layers for inference, on weights repacked once at load.
//!
//! [`super::Linear`] keeps PyTorch's `[out, in]` layout, which training updates in place, and
//! its small-batch kernel computes dot products: every output ends in a horizontal sum, and
//! a 4×3 tile loads seven vectors for twelve multiply-adds. A served model's weights never
//! change, so here they are rearranged once into panels of [`PANEL`] outputs, each panel
//! k-major (`[panel][k][16]`). Then a register tile of up to six rows × 16 outputs takes,
//! per input feature, two weight vectors and one broadcast input value per row — twelve
//! multiply-adds for eight loads at six rows, with no horizontal sums — and each panel is one
//! sequential stream. The benchmark that compares it with `Linear`'s kernels is `tandem-bench
//! forward`, alternating builds (`benches/ab.sh`); the gain is largest where the weights stay
//! in cache, since in a serving process the kernel waits on its weight loads.
//!
//! Because it waits on them, 16-bit weights (f16, bf16) stay 16-bit here — half the bytes
//! to stream — and are widened in registers as they are loaded. Widening is exact, so with
//! f32 products the outputs are bit for bit those of weights widened to f32 at load.
//!
//! Where the CPU has AVX-512 (`avx512`), a panel's row is one register, and a tile of eight
//! rows × two panels does sixteen 16-lane multiply-adds for ten loads: twice the work per
//! instruction of the AVX2 tile, on the same panels. The benchmark that compares them is
//! `encoder_bench::dense_kernel_choice_one_core` (docs/performance.md).

use std::ops::Range;

use half::{bf16, f16};

use super::small_batch::Shape;
use super::{Aligned, AlignedVec, Element, OutPtr, check_buffers, in_parallel, threads_for};
use crate::{Activation, HostWeights, KernelError};
use bf16_forward::{amx_available, pack_pairs};

/// Outputs per panel: two 8-lane AVX2 vectors, or one 16-lane AVX-512 vector.
pub const PANEL: usize = 16;

/// Rows per block when a batch is large: a block's inputs (48 rows of 1024 features, 192 KB)
/// stay in L2 while every panel of weights passes over them once.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
const ROW_BLOCK: usize = 48;

/// Pieces a layer's panels are cut into per thread. In a server the compute threads share
/// the cores with the HTTP threads, and the scheduler takes a core from one of them now
/// and then; with one piece each, the others then wait at the end of the layer for the
/// one that was preempted, while with four they take over what it has not started. The
/// benchmark that supports it: two servers side by side past saturation, `tandem-bench
/// load --rate 20000 --bodies 64` on each in turn.
const PIECES_PER_THREAD: usize = 4;

/// The precision a layer's products take their operands in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatmulPrecision {
    /// Inputs in f32 times the weights as stored, widened exactly: the checkpoint's
    /// arithmetic.
    #[default]
    F32,
    /// Inputs and weights rounded to bfloat16, their products summed in f32: twice the
    /// multiply-add rate of f32 on CPUs with AVX-512 BF16 (AMD Zen 4), and several times it
    /// on AMX's tiles where the CPU has them too (Intel Xeon from Sapphire Rapids); on CPUs
    /// with AVX-512 BF16 only ([`Self::available`]).
    Bf16,
    /// f32 products emulated by three bf16 products on AMX's tiles, each operand split into
    /// two bf16 parts ("bf16x3", [`bf16x3`]): about 16 significant bits an operand where f32
    /// has 24 and bf16 8, at about twice f32's multiply-add rate; on CPUs with AMX only.
    Bf16x3,
}

impl MatmulPrecision {
    /// About how much faster this CPU's dense layers run with `self`'s products than with
    /// f32's, for cost models that weigh them against what stays f32: `vdpbf16ps` does
    /// twice an FMA's multiply-adds an instruction, and AMX's tiles about six times f32's
    /// rate from 64 rows (`encoder_bench::dense_kernel_choice_one_core`), which bf16x3's
    /// three products divide by three.
    pub fn dense_speedup(self) -> f64 {
        match self {
            MatmulPrecision::F32 => 1.0,
            MatmulPrecision::Bf16 if amx_available() => 6.0,
            MatmulPrecision::Bf16 => 2.0,
            MatmulPrecision::Bf16x3 => 2.0,
        }
    }

    /// What a CPU needs to run `self`'s products, in words.
    pub fn requires(self) -> &'static str {
        match self {
            MatmulPrecision::F32 => "nothing more",
            MatmulPrecision::Bf16 => "AVX-512 BF16",
            MatmulPrecision::Bf16x3 => "AMX",
        }
    }

    /// Whether this CPU has a kernel for `self`.
    pub fn available(self) -> bool {
        match self {
            MatmulPrecision::F32 => true,
            #[cfg(target_arch = "x86_64")]
            MatmulPrecision::Bf16 => bf16_products::available(),
            #[cfg(target_arch = "x86_64")]
            MatmulPrecision::Bf16x3 => bf16_products::available() && amx_available(),
            #[cfg(not(target_arch = "x86_64"))]
            MatmulPrecision::Bf16 | MatmulPrecision::Bf16x3 => false,
        }
    }
}

/// A dense layer `y = act(x · Wᵀ + b)` with its weights in panels, for inference.
#[derive(Clone, Debug)]
pub struct PackedLinear {
    inputs: usize,
    outputs: usize,
    /// `[panels][inputs][PANEL]`; the outputs past `outputs` in the last panel are zeros.
    panels: Panels,
    /// `panels * PANEL` biases, zeros past `outputs`.
    bias: Vec<f32>,
}

impl PackedLinear {
    /// Takes a `[outputs, inputs]` row-major weight matrix (PyTorch's `nn.Linear` layout), in
    /// the precision it was stored in, and `outputs` biases.
    pub fn new(
        weight: HostWeights<'_>,
        bias: &[f32],
        inputs: usize,
        outputs: usize,
    ) -> Result<Self, KernelError> {
        Self::with_precision(weight, bias, inputs, outputs, MatmulPrecision::F32)
    }

    /// As [`Self::new`], its products in `precision`; an error where this CPU has no
    /// kernel for it.
    pub fn with_precision(
        weight: HostWeights<'_>,
        bias: &[f32],
        inputs: usize,
        outputs: usize,
        precision: MatmulPrecision,
    ) -> Result<Self, KernelError> {
        if !precision.available() {
            return Err(KernelError::Unsupported {
                op: "cpu::PackedLinear::with_precision",
                detail: format!(
                    "{precision:?} products need a CPU with {}",
                    precision.requires()
                ),
            });
        }
        if weight.len() != inputs * outputs || bias.len() != outputs {
            return Err(KernelError::Shape {
                op: "cpu::PackedLinear::with_precision",
                detail: format!(
                    "weight has {} values and bias {}, expected {outputs}x{inputs} and {outputs}",
                    weight.len(),
                    bias.len(),
                ),
            });
        }
        let panels = match (precision, weight) {
            (MatmulPrecision::Bf16 | MatmulPrecision::Bf16x3, w) => {
                pack_pairs(precision, w, inputs, outputs)
            }
            (_, HostWeights::F32(w)) => Panels::F32(pack(w, inputs, outputs, |v| v)),
            (_, HostWeights::F16(w)) => Panels::F16(pack(w, inputs, outputs, f16::to_bits)),
            (_, HostWeights::BF16(w)) => Panels::BF16(pack(w, inputs, outputs, bf16::to_bits)),
        };
        let mut padded_bias = bias.to_vec();
        padded_bias.resize(outputs.div_ceil(PANEL) * PANEL, 0.0);
        Ok(PackedLinear {
            inputs,
            outputs,
            panels,
            bias: padded_bias,
        })
    }

    pub fn inputs(&self) -> usize {
        self.inputs
    }

    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// The precision its products take their operands in.
    pub fn precision(&self) -> MatmulPrecision {
        match self.panels {
            Panels::Bf16Pairs(_) => MatmulPrecision::Bf16,
            Panels::Bf16x3Pairs(_) => MatmulPrecision::Bf16x3,
            _ => MatmulPrecision::F32,
        }
    }

    /// `y[rows, outputs] = act(x[rows, inputs] · Wᵀ + b)`, the panels split over up to
    /// `threads` threads of the current rayon pool.
    pub fn forward(
        &self,
        x: &[f32],
        rows: usize,
        y: &mut [f32],
        act: Activation,
        threads: usize,
    ) -> Result<(), KernelError> {
        check_buffers(
            "cpu::PackedLinear::forward",
            x,
            y,
            rows,
            self.inputs,
            self.outputs,
        )?;
        if rows == 0 || self.outputs == 0 {
            return Ok(());
        }
        let threads = threads_for(rows, self.inputs, self.outputs, threads);
        let shape = Shape {
            rows,
            k: self.inputs,
            n: self.outputs,
        };
        if let Some(done) = self.forward_pairs(x, y, shape, act, threads) {
            return done;
        }
        let out = OutPtr(y.as_mut_ptr());
        let pieces = threads * PIECES_PER_THREAD;
        in_parallel(self.outputs.div_ceil(PANEL), 1, pieces, |panels| {
            let out = &out;
            let bias = &self.bias[..];
            // SAFETY: x holds rows * inputs values and y rows * outputs (checked above); the
            // panels and biases were sized in `new`; each call writes only the columns of its
            // own panels, and the ranges are disjoint.
            unsafe {
                match &self.panels {
                    Panels::F32(p) => dense::<F32>(x, p, bias, out.0, shape, panels, act),
                    Panels::F16(p) => dense::<F16>(x, p, bias, out.0, shape, panels, act),
                    Panels::BF16(p) => dense::<BF16>(x, p, bias, out.0, shape, panels, act),
                    Panels::Bf16Pairs(_) | Panels::Bf16x3Pairs(_) => {
                        unreachable!("bf16 and bf16x3 products run in forward_pairs")
                    }
                }
            }
        });
        Ok(())
    }
}

/// The panels in the checkpoint's precision.
#[derive(Clone, Debug)]
enum Panels {
    F32(AlignedVec),
    /// IEEE half precision, as bits.
    F16(Aligned<u16>),
    /// bfloat16 (the top half of an f32), as bits.
    BF16(Aligned<u16>),
    /// Rounded to bfloat16 for bf16 products, `[panels][paired(inputs)/2][PANEL][2]`
    /// ([`bf16_products`]; AMX's tiles read the same).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Bf16Pairs(Aligned<u16>),
    /// Split into two bf16 parts for bf16x3 products, `[hi(w); lo(w)]` along the inputs:
    /// `[panels][paired(inputs)][PANEL][2]` ([`bf16x3`]).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Bf16x3Pairs(Aligned<u16>),
}

/// `weight` (`[outputs, inputs]`) rearranged into `[panels][inputs][PANEL]`, zero-padded,
/// each value stored as `store` gives it: written straight into the one buffer the layer
/// keeps, so loading a model holds no second copy of its weights.
fn pack<T: Copy, B: Element>(
    weight: &[T],
    inputs: usize,
    outputs: usize,
    store: impl Fn(T) -> B,
) -> Aligned<B> {
    let mut packed = Aligned::default();
    packed.resize(outputs.div_ceil(PANEL) * inputs * PANEL);
    for (o, row) in weight.chunks_exact(inputs.max(1)).enumerate().take(outputs) {
        let panel = &mut packed[(o / PANEL) * inputs * PANEL..][..inputs * PANEL];
        for (k, &w) in row.iter().enumerate() {
            panel[k * PANEL + o % PANEL] = store(w);
        }
    }
    packed
}

/// How the weights of a panel are stored, and widened to f32.
trait Format {
    type Bits: Copy;
    fn widen(bits: Self::Bits) -> f32;
    /// Eight consecutive weights as f32 lanes.
    ///
    /// # Safety
    /// `p` points to eight readable values on a 16-byte boundary, and the caller runs with
    /// AVX2 and F16C enabled.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load8(p: *const Self::Bits) -> std::arch::x86_64::__m256;
    /// Sixteen consecutive weights (a panel's row) as f32 lanes.
    ///
    /// # Safety
    /// `p` points to sixteen readable values on a 32-byte boundary (64 for f32), and the
    /// caller runs with AVX-512 F enabled.
    #[cfg(target_arch = "x86_64")]
    unsafe fn load16(p: *const Self::Bits) -> std::arch::x86_64::__m512;
}

struct F32;
struct F16;
struct BF16;

impl Format for F32 {
    type Bits = f32;
    fn widen(bits: f32) -> f32 {
        bits
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const f32) -> std::arch::x86_64::__m256 {
        // SAFETY: f32 panels start on a cache line and rows are 64 bytes, so eight values
        // at a row or half-row offset are 32-byte aligned (the caller's contract).
        unsafe { std::arch::x86_64::_mm256_load_ps(p) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const f32) -> std::arch::x86_64::__m512 {
        // SAFETY: a panel's row of f32 is one aligned cache line (the caller's contract).
        unsafe { std::arch::x86_64::_mm512_load_ps(p) }
    }
}

impl Format for F16 {
    type Bits = u16;
    fn widen(bits: u16) -> f32 {
        f16::from_bits(bits).to_f32()
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const u16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: sixteen aligned bytes (the caller's contract); F16C converts them exactly.
        unsafe { _mm256_cvtph_ps(_mm_load_si128(p.cast())) }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const u16) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        // SAFETY: thirty-two aligned bytes (the caller's contract); the conversion is exact.
        unsafe { _mm512_cvtph_ps(_mm256_load_si256(p.cast())) }
    }
}

impl Format for BF16 {
    type Bits = u16;
    fn widen(bits: u16) -> f32 {
        bf16::from_bits(bits).to_f32()
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load8(p: *const u16) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64::*;
        // SAFETY: sixteen aligned bytes (the caller's contract). A bf16 is the top half of
        // an f32: zero-extend each to 32 bits and shift it up.
        unsafe {
            _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(
                _mm_load_si128(p.cast()),
            )))
        }
    }
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn load16(p: *const u16) -> std::arch::x86_64::__m512 {
        use std::arch::x86_64::*;
        // SAFETY: thirty-two aligned bytes (the caller's contract); widened as in `load8`.
        unsafe {
            _mm512_castsi512_ps(_mm512_slli_epi32::<16>(_mm512_cvtepu16_epi32(
                _mm256_load_si256(p.cast()),
            )))
        }
    }
}

/// Computes the outputs of `panels` for every row.
///
/// # Safety
/// `x` holds `rows * k` values; `p` holds `[panels.end][k][PANEL]` values, starting on a
/// cache line, and `bias` `panels.end * PANEL`; `y` points to `rows * n` writable values with
/// `(panels.end - 1) * PANEL < n`. No other thread writes those panels' columns of `y`.
unsafe fn dense<F: Format>(
    x: &[f32],
    p: &[F::Bits],
    bias: &[f32],
    y: *mut f32,
    shape: Shape,
    panels: Range<usize>,
    act: Activation,
) {
    // SAFETY: forwarded contract; `Isa::best` is what this CPU supports.
    unsafe { dense_on::<F>(Isa::best(), x, p, bias, y, shape, panels, act) }
}

/// The instruction sets the kernel has a path for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Isa {
    Avx512,
    Avx2,
    Portable,
}

impl Isa {
    /// The widest this CPU supports.
    fn best() -> Isa {
        [Isa::Avx512, Isa::Avx2]
            .into_iter()
            .find(|isa| isa.available())
            .unwrap_or(Isa::Portable)
    }

    /// Whether this CPU can run `self`'s path (std caches the detection).
    fn available(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            match self {
                Isa::Avx512 => has!("avx512f"),
                Isa::Avx2 => has!("avx2") && has!("fma") && has!("f16c"),
                Isa::Portable => true,
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Isa::Portable
        }
    }
}

/// [`dense`] on the path of `isa`.
///
/// # Safety
/// As [`dense`], and the CPU supports `isa`.
#[allow(clippy::too_many_arguments)]
unsafe fn dense_on<F: Format>(
    isa: Isa,
    x: &[f32],
    p: &[F::Bits],
    bias: &[f32],
    y: *mut f32,
    shape: Shape,
    panels: Range<usize>,
    act: Activation,
) {
    // SAFETY: the caller upholds the buffer contract, which is the same for every path, and
    // the CPU supports the one chosen.
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => avx512::dense::<F>(x, p, bias, y, shape, panels, act),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => avx2::dense::<F>(x, p, bias, y, shape, panels, act),
            _ => portable::dense::<F>(x, p, bias, y, shape, panels, act),
        }
    }
}

/// How many of the `left` rows of a block the next tile takes: 1 to 6. Six rows keep twelve
/// accumulators busy; five, ten. Fewer leave the multiply-add units waiting on their own
/// latency (five cycles, two units: ten chains to fill them), so a block is cut to avoid
/// tiles of one, two or four rows (8 = 5 + 3, not 6 + 2 or 4 + 4), which a batch of that
/// size alone still needs.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn tile_rows(left: usize) -> usize {
    match left {
        0..=6 => left,
        7 => 4,
        8 | 10 | 13 => 5,
        _ => 6,
    }
}

#[cfg(target_arch = "x86_64")]
mod amx;
mod bf16_forward;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod bf16_products;
#[cfg(target_arch = "x86_64")]
mod bf16x3;

mod portable {
    use std::ops::Range;

    use super::{Format, PANEL, Shape};
    use crate::Activation;
    use crate::cpu::activate;

    /// # Safety
    /// As [`super::dense`].
    pub(super) unsafe fn dense<F: Format>(
        x: &[f32],
        p: &[F::Bits],
        bias: &[f32],
        y: *mut f32,
        s: Shape,
        panels: Range<usize>,
        act: Activation,
    ) {
        for b in 0..s.rows {
            let xr = &x[b * s.k..(b + 1) * s.k];
            for panel in panels.clone() {
                let weights = &p[panel * s.k * PANEL..(panel + 1) * s.k * PANEL];
                let mut sums = [0f32; PANEL];
                sums.copy_from_slice(&bias[panel * PANEL..][..PANEL]);
                for (xv, w) in xr.iter().zip(weights.chunks_exact(PANEL)) {
                    for (sum, &wv) in sums.iter_mut().zip(w) {
                        *sum += xv * F::widen(wv);
                    }
                }
                let o = panel * PANEL;
                for (j, sum) in sums
                    .iter()
                    .enumerate()
                    .take(s.n.saturating_sub(o).min(PANEL))
                {
                    // SAFETY: b < rows and o + j < n, per the caller's contract.
                    unsafe { *y.add(b * s.n + o + j) = activate(*sum, act) };
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
