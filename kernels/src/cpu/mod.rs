//! Dense layers on the CPU.
//!
//! Two layouts, for two uses. Serving runs [`PackedLinear`]: a model's weights never change
//! once loaded, so they are rearranged at load into panels of 16 outputs for a register-tiled
//! kernel that needs no horizontal sums (`packed`), which does more per instruction than the
//! kernels below (`tandem-bench forward`). Training runs
//! [`Linear`], whose `[out, in]` f32 matrix (PyTorch's layout, on a cache line:
//! [`AlignedVec`]; f16 and bf16 are widened with `half`) the optimiser updates in place;
//! its forward call picks a kernel by batch size: up to
//! [`SMALL_BATCH_ROWS`] rows our own dot-product kernel (`small_batch`), which streams the
//! weights once; above that the `gemm` crate, which packs its operands into cache-sized
//! panels on every call and wins once that is amortised over many rows. Both were measured
//! with `cargo bench --bench gemm` (see benches/README.md).

mod activations;
pub mod affinity;
mod aligned;
#[cfg(target_arch = "x86_64")]
mod amx;
mod attention;
mod awake;
pub mod clock;
#[cfg(test)]
mod encoder_bench;
mod layer_norm;
mod packed;
pub mod peak;
mod small_batch;
#[cfg(test)]
mod test_support;
mod vmath;

pub use activations::{exp_in_place, gelu_in_place, gelu_tanh_in_place, silu_in_place};
pub use aligned::{Aligned, AlignedVec, Element};
pub use attention::{
    AttentionInput, AttentionScratch, AttentionShape, RelativeBias, attention, attention_speedup,
    biased_attention,
};
pub use awake::with_pool_awake;
use gemm::Parallelism;
pub use layer_norm::{NormParams, add_layer_norm};
pub use packed::{MatmulPrecision, PANEL, PackedLinear};

use crate::{Activation, KernelError};
use small_batch::Shape;

/// Batches up to this many rows run on our own kernel, larger ones on `gemm`. Measured on
/// the 784→1024→1024→10 shapes: ours is faster up to 128 rows, even at 256, behind at 512.
pub const SMALL_BATCH_ROWS: usize = 192;

/// Which kernel a forward call runs on. `Auto` picks by batch size; the others exist for
/// benchmarks and tests that must exercise one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuKernel {
    Auto,
    SmallBatch,
    Gemm,
}

/// Below this many multiply-adds a layer runs on the calling thread: waking a second
/// thread costs more than it saves.
const PARALLEL_MIN_MACS: usize = 256 * 1024;

/// A dense layer `y = act(x · Wᵀ + b)` whose weights live in host memory.
#[derive(Clone, Debug)]
pub struct Linear {
    inputs: usize,
    outputs: usize,
    /// `[outputs, inputs]`, row-major (PyTorch's `nn.Linear` layout), on a cache line.
    weight: AlignedVec,
    bias: Vec<f32>,
}

impl Linear {
    /// Takes a `[outputs, inputs]` row-major weight matrix and `outputs` biases.
    pub fn new(
        weight: Vec<f32>,
        bias: Vec<f32>,
        inputs: usize,
        outputs: usize,
    ) -> Result<Self, KernelError> {
        if weight.len() != inputs * outputs || bias.len() != outputs {
            return Err(KernelError::Shape {
                op: "cpu::Linear::new",
                detail: format!(
                    "weight has {} values and bias {}, expected {}x{} and {}",
                    weight.len(),
                    bias.len(),
                    outputs,
                    inputs,
                    outputs
                ),
            });
        }
        Ok(Linear {
            inputs,
            outputs,
            weight: AlignedVec::from_slice(&weight),
            bias,
        })
    }

    pub fn inputs(&self) -> usize {
        self.inputs
    }

    pub fn outputs(&self) -> usize {
        self.outputs
    }

    pub fn weight(&self) -> &[f32] {
        &self.weight
    }

    pub fn bias(&self) -> &[f32] {
        &self.bias
    }

    /// Mutable access for training, which updates the weights in place.
    pub fn params_mut(&mut self) -> (&mut [f32], &mut [f32]) {
        (&mut self.weight, &mut self.bias)
    }

    /// `y[rows, outputs] = act(x[rows, inputs] · Wᵀ + b)`, on up to `threads` threads of the
    /// current rayon pool.
    pub fn forward(
        &self,
        x: &[f32],
        rows: usize,
        y: &mut [f32],
        act: Activation,
        threads: usize,
    ) -> Result<(), KernelError> {
        self.forward_using(CpuKernel::Auto, x, rows, y, act, threads)
    }

    /// [`Linear::forward`] on a chosen kernel.
    pub fn forward_using(
        &self,
        kernel: CpuKernel,
        x: &[f32],
        rows: usize,
        y: &mut [f32],
        act: Activation,
        threads: usize,
    ) -> Result<(), KernelError> {
        check_buffers(
            "cpu::Linear::forward",
            x,
            y,
            rows,
            self.inputs,
            self.outputs,
        )?;
        if rows == 0 {
            return Ok(());
        }
        let threads = threads_for(rows, self.inputs, self.outputs, threads);
        let small = match kernel {
            CpuKernel::Auto => rows <= SMALL_BATCH_ROWS,
            CpuKernel::SmallBatch => true,
            CpuKernel::Gemm => false,
        };
        if small {
            self.forward_small(x, rows, y, act, threads);
        } else {
            self.forward_gemm(x, rows, y, act, threads);
        }
        Ok(())
    }

    fn forward_small(
        &self,
        x: &[f32],
        rows: usize,
        y: &mut [f32],
        act: Activation,
        threads: usize,
    ) {
        let shape = Shape {
            rows,
            k: self.inputs,
            n: self.outputs,
        };
        let out = OutPtr(y.as_mut_ptr());
        // Ranges of outputs, each a multiple of the kernel's 4-wide tile.
        in_parallel(self.outputs, 4, threads, |outs| {
            let out = &out;
            // SAFETY: x, weight and bias were checked against the shape in `forward`; y holds
            // rows * outputs values; each call writes only the columns `outs`, and the
            // ranges are disjoint.
            unsafe { small_batch::dense_rows(x, &self.weight, &self.bias, out.0, shape, outs, act) }
        });
    }

    fn forward_gemm(&self, x: &[f32], rows: usize, y: &mut [f32], act: Activation, threads: usize) {
        for row in y.chunks_exact_mut(self.outputs) {
            row.copy_from_slice(&self.bias);
        }
        let (k, n) = (self.inputs, self.outputs);
        // SAFETY: dst is rows x n row-major (y), lhs rows x k row-major (x), rhs is k x n
        // read from the [n, k] weight matrix through strides (row stride 1, column stride k);
        // all lengths were checked in `forward`.
        unsafe {
            gemm::gemm(
                rows,
                n,
                k,
                y.as_mut_ptr(),
                1,
                n as isize,
                true,
                x.as_ptr(),
                1,
                k as isize,
                self.weight.as_ptr(),
                k as isize,
                1,
                1.0,
                1.0,
                false,
                false,
                false,
                parallelism(threads),
            );
        }
        if act == Activation::Relu {
            for v in y.iter_mut() {
                *v = v.max(0.0);
            }
        }
    }
}

/// A row-major matrix, or the transpose of one, borrowed for [`matmul`].
#[derive(Clone, Copy, Debug)]
pub struct MatRef<'a> {
    data: &'a [f32],
    rows: usize,
    cols: usize,
    /// The storage is `[cols, rows]` row-major and this is its transpose.
    transposed: bool,
}

impl<'a> MatRef<'a> {
    /// A row-major `[rows, cols]` matrix.
    pub fn new(data: &'a [f32], rows: usize, cols: usize) -> MatRef<'a> {
        MatRef {
            data,
            rows,
            cols,
            transposed: false,
        }
    }

    /// The transpose, as a view: nothing moves.
    pub fn t(self) -> MatRef<'a> {
        MatRef {
            data: self.data,
            rows: self.cols,
            cols: self.rows,
            transposed: !self.transposed,
        }
    }

    /// (row stride, column stride) of the logical matrix in `data`.
    fn strides(&self) -> (isize, isize) {
        if self.transposed {
            (1, self.rows as isize)
        } else {
            (self.cols as isize, 1)
        }
    }
}

/// `c[m, n] = a[m, k] · b[k, n]` (or `+=` with `accumulate`), row-major `c`, on up to
/// `threads` threads of the current rayon pool. For training's backward products.
///
/// # Panics
/// If the shapes do not agree or `c` is not `m * n` long: callers pass shapes they built.
pub fn matmul(c: &mut [f32], a: MatRef<'_>, b: MatRef<'_>, accumulate: bool, threads: usize) {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    assert_eq!(b.rows, k, "matmul: inner dimensions differ");
    assert_eq!(c.len(), m * n, "matmul: output size");
    assert!(
        a.data.len() >= m * k && b.data.len() >= k * n,
        "matmul: operand size"
    );
    let (ars, acs) = a.strides();
    let (brs, bcs) = b.strides();
    // SAFETY: the asserts above bound every index the strides reach: a spans m x k, b spans
    // k x n, c is m x n row-major.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c.as_mut_ptr(),
            1,
            n as isize,
            accumulate,
            a.data.as_ptr(),
            acs,
            ars,
            b.data.as_ptr(),
            bcs,
            brs,
            1.0,
            1.0,
            false,
            false,
            false,
            parallelism(threads),
        );
    }
}

pub(crate) fn parallelism(threads: usize) -> Parallelism {
    if threads > 1 {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    }
}

/// Refuses buffers that do not hold `rows` rows of `inputs` and `outputs` values.
fn check_buffers(
    op: &'static str,
    x: &[f32],
    y: &[f32],
    rows: usize,
    inputs: usize,
    outputs: usize,
) -> Result<(), KernelError> {
    if x.len() == rows * inputs && y.len() == rows * outputs {
        return Ok(());
    }
    Err(KernelError::Shape {
        op,
        detail: format!(
            "{rows} rows need {} inputs and {} outputs, got {} and {}",
            rows * inputs,
            rows * outputs,
            x.len(),
            y.len()
        ),
    })
}

/// How many threads a layer of this size is worth: one below [`PARALLEL_MIN_MACS`].
fn threads_for(rows: usize, inputs: usize, outputs: usize, threads: usize) -> usize {
    if rows * inputs * outputs < PARALLEL_MIN_MACS {
        1
    } else {
        threads.max(1)
    }
}

/// Runs `work` over `0..units` cut into at most `pieces` contiguous ranges (each but the
/// last a multiple of `granule`): the first on this thread, the others on the current rayon
/// pool, whose threads take them as they come free; returns when all are done.
fn in_parallel(
    units: usize,
    granule: usize,
    pieces: usize,
    work: impl Fn(std::ops::Range<usize>) + Sync,
) {
    let chunk = units.div_ceil(pieces.max(1)).div_ceil(granule) * granule;
    if chunk >= units {
        work(0..units);
        return;
    }
    let work = &work;
    rayon::scope(|s| {
        for start in (chunk..units).step_by(chunk) {
            s.spawn(move |_| work(start..(start + chunk).min(units)));
        }
        work(0..chunk);
    });
}

/// `v` after the layer's activation.
#[inline(always)]
fn activate(v: f32, act: Activation) -> f32 {
    match act {
        Activation::Identity => v,
        Activation::Relu => v.max(0.0),
        Activation::Gelu => vmath::gelu(v),
    }
}

/// The output pointer shared by the threads of one layer, each writing its own columns (or,
/// rounding a layer's inputs for bf16 products, its own rows).
struct OutPtr<T = f32>(*mut T);
// SAFETY: the threads sharing an OutPtr write disjoint columns or rows (see `forward_small`
// and `PackedLinear::forward_bf16`), and the scope ends before the borrowed buffer does.
unsafe impl<T> Sync for OutPtr<T> {}

#[cfg(test)]
mod tests {
    use super::test_support::{assert_close, reference, values};
    use super::*;

    #[test]
    fn in_parallel_covers_every_unit_once_in_granules() {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(2)
            .build()
            .unwrap();
        for (units, granule, pieces) in [(64, 1, 8), (65, 1, 8), (1000, 4, 2), (7, 4, 8), (3, 1, 1)]
        {
            let seen = std::sync::Mutex::new(Vec::new());
            pool.install(|| in_parallel(units, granule, pieces, |r| seen.lock().unwrap().push(r)));
            let mut ranges = seen.into_inner().unwrap();
            ranges.sort_by_key(|r| r.start);
            let case = format!("{units} units, granule {granule}, {pieces} pieces: {ranges:?}");
            assert!(ranges.len() <= pieces, "{case}");
            assert_eq!(ranges.first().map(|r| r.start), Some(0), "{case}");
            assert_eq!(ranges.last().map(|r| r.end), Some(units), "{case}");
            for pair in ranges.windows(2) {
                assert_eq!(pair[0].end, pair[1].start, "{case}");
                assert_eq!(pair[0].len() % granule, 0, "{case}");
            }
        }
    }

    fn cases() -> impl Iterator<Item = (Activation, CpuKernel, usize)> {
        [Activation::Identity, Activation::Relu]
            .into_iter()
            .flat_map(|act| {
                [CpuKernel::Auto, CpuKernel::SmallBatch, CpuKernel::Gemm]
                    .into_iter()
                    .flat_map(move |kernel| [1, 2, 3].map(|threads| (act, kernel, threads)))
            })
    }

    #[test]
    fn both_kernels_match_the_reference_on_odd_shapes() {
        // k not a multiple of 8, n not a multiple of 4, rows on both sides of the crossover.
        for (k, n) in [(13, 7), (64, 130), (257, 33)] {
            let l = Linear::new(values(k * n, 1), values(n, 2), k, n).unwrap();
            for rows in [1, 2, 3, 17, 130] {
                for (act, kernel, threads) in cases() {
                    let x = values(rows * k, rows as u64);
                    let mut y = vec![f32::NAN; rows * n];
                    l.forward_using(kernel, &x, rows, &mut y, act, threads)
                        .unwrap();
                    let want = reference(&l.weight, &l.bias, &x, rows, k, act);
                    let context = format!("{kernel:?} k={k} n={n} rows={rows} threads={threads}");
                    assert_close(&y, &want, &context);
                }
            }
        }
    }

    #[test]
    fn matmul_handles_transposed_views_and_accumulation() {
        // a = [[1,2,3],[4,5,6]] (2x3), b = [[1,0],[0,1],[1,1]] (3x2)
        let a = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let b = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0];
        let mut c = vec![0.0; 4];
        matmul(
            &mut c,
            MatRef::new(&a, 2, 3),
            MatRef::new(&b, 3, 2),
            false,
            1,
        );
        assert_eq!(c, vec![4.0, 5.0, 10.0, 11.0]);
        // aᵀ·a = 3x3, accumulated twice.
        let mut c = vec![0.0; 9];
        for _ in 0..2 {
            matmul(
                &mut c,
                MatRef::new(&a, 2, 3).t(),
                MatRef::new(&a, 2, 3),
                true,
                2,
            );
        }
        assert_eq!(
            c,
            vec![34.0, 44.0, 54.0, 44.0, 58.0, 72.0, 54.0, 72.0, 90.0]
        );
    }

    #[test]
    fn mismatched_buffers_are_an_error() {
        let l = Linear::new(vec![0.0; 6], vec![0.0; 2], 3, 2).unwrap();
        let mut y = vec![0.0; 4];
        let err = l
            .forward(&[0.0; 5], 2, &mut y, Activation::Relu, 1)
            .unwrap_err();
        assert!(err.to_string().contains("2 rows need 6 inputs"), "{err}");
        assert!(Linear::new(vec![0.0; 5], vec![0.0; 2], 3, 2).is_err());
    }
}
