//! The ops of a BERT-family text encoder on a GPU, as safe calls on device buffers that
//! callers hold without seeing cudarc: dense layers on cuBLAS ([`super::linear`]; 16-bit
//! weights meet 16-bit copies of their inputs on the tensor cores, accumulating in f32),
//! and the kernels of `kernels/cuda/encoder.cu` for embeddings, layer norms (with the
//! residual and the preceding layer's bias folded in), bias + GELU, attention over packed
//! sequences (with MPNet's bias by relative position, or within a sliding window) and
//! pooling; and, in [`modern`], ModernBERT's rotary positions, gated GELU and residual sums.
//!
//! Everything is queued on one stream, in order; only [`EncoderOps::download`] waits.
//! Buffers grow to the largest batch seen and are never shrunk.

use std::sync::Arc;

use cudarc::driver::{CudaFunction, CudaSlice, LaunchConfig, PushKernelArg};

mod modern;

pub use super::buffer::DeviceVec;
use super::buffer::{HalfVec, short};
use super::linear::{Executor, Linear, SliceActivations, elementwise};
use super::{CudaDevice, StreamPriority, sources};
use crate::cpu::AttentionShape;
use crate::{DType, HostWeights, KernelError};
pub use modern::RotaryTables;

/// A packed batch on the host, as [`EncoderOps::upload_batch`] takes it: per token its id,
/// type id and row of the position table, and the sequences' offsets (one more than there
/// are sequences, from 0 to the number of tokens).
#[derive(Clone, Copy, Debug)]
pub struct BatchIds<'a> {
    pub ids: &'a [u32],
    pub type_ids: &'a [u32],
    pub positions: &'a [u32],
    pub offsets: &'a [usize],
}

/// A packed batch on the device: per token its id, type id and row of the position table,
/// and the sequences' offsets, in one allocation.
#[derive(Default)]
pub struct DeviceBatch {
    data: Option<CudaSlice<u32>>,
    tokens: usize,
    sequences: usize,
    longest: usize,
    /// One past the largest position: the position table must have this many rows.
    positions_below: usize,
    /// The same values on the host, reused between uploads.
    staging: Vec<u32>,
}

impl DeviceBatch {
    pub fn tokens(&self) -> usize {
        self.tokens
    }

    pub fn sequences(&self) -> usize {
        self.sequences
    }
}

/// The tables [`EncoderOps::embed`] adds up: the word table, and the position and token
/// type tables of the families that have them.
#[derive(Clone, Copy)]
pub struct EmbeddingTables<'a> {
    pub word: &'a DeviceVec,
    pub position: Option<&'a DeviceVec>,
    pub token_type: Option<&'a DeviceVec>,
}

/// How a dense layer's output is finished.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Epilogue {
    /// `x · Wᵀ` only: the bias is added by the op that reads it (a layer norm's residual).
    None,
    /// `x · Wᵀ + b`.
    Bias,
    /// `gelu(x · Wᵀ + b)`, with the exact error function.
    BiasGelu,
}

/// The residual a layer norm adds first: a dense layer's output and that layer, whose
/// bias is added with it.
pub struct Residual<'a> {
    pub output: &'a DeviceVec,
    pub layer: &'a Linear,
}

/// A layer norm's parameters on the device.
pub struct DeviceNorm {
    gamma: CudaSlice<f32>,
    beta: CudaSlice<f32>,
    eps: f32,
}

/// Threads per block of the row-wise kernels (a multiple of 32).
const ROW_THREADS: u32 = 128;
/// Must match encoder.cu.
const ATT_QUERIES: usize = 16;
const ATT_KEYS: usize = 64;
const ATT_WARPS: u32 = 4;
/// MPNet's attention bias by relative position, on the device: head `h`'s score of query
/// `i` for key `j` of a sequence gains `table[h · (2·span − 1) + span − 1 + j − i]`, as the
/// CPU's `RelativeBias`. `span` is at least the batch's longest sequence.
#[derive(Clone, Copy)]
pub struct AttentionBias<'a> {
    pub table: &'a DeviceVec,
    pub span: usize,
}

/// How [`EncoderOps::attention`] attends: the heads, MPNet's bias if any, and a sliding
/// window if any (each query then attends only to the keys at most that many positions
/// away, and only the key tiles the windows reach are read).
#[derive(Clone, Copy)]
pub struct AttentionSpec<'a> {
    pub shape: AttentionShape,
    pub bias: Option<AttentionBias<'a>>,
    pub window: Option<usize>,
}

/// The largest head size attention runs on CUDA (encoder.cu's `ATT_MAX_DIM`).
pub const MAX_HEAD_DIM: usize = 64;
const ATT_MAX_DIM: usize = MAX_HEAD_DIM;
/// Blocks of a grid's y and z dimensions.
const MAX_GRID_YZ: usize = 65_535;

/// The encoder's ops on one stream of one device.
pub struct EncoderOps {
    exec: Executor,
    embed: CudaFunction,
    add_layer_norm: CudaFunction,
    bias_gelu: CudaFunction,
    attention: CudaFunction,
    pool: CudaFunction,
    add_in_place: CudaFunction,
    gelu_gate: CudaFunction,
    rotary: CudaFunction,
    /// 16-bit copies of dense layers' inputs.
    half: HalfVec,
}

fn launch_error(context: &'static str) -> impl Fn(cudarc::driver::DriverError) -> KernelError {
    KernelError::driver(context)
}

/// `n` as the `unsigned int` the kernels take.
fn u32_of(op: &'static str, n: usize) -> Result<u32, KernelError> {
    u32::try_from(n).map_err(|_| KernelError::Shape {
        op,
        detail: format!("{n} does not fit the kernels' 32-bit sizes"),
    })
}

impl EncoderOps {
    /// Compiles (once per device) and loads the kernels, on a new serving-priority stream.
    pub fn new(device: Arc<CudaDevice>) -> Result<EncoderOps, KernelError> {
        let source = &sources::ENCODER;
        Ok(EncoderOps {
            embed: device.function(source, "embed")?,
            add_layer_norm: device.function(source, "add_layer_norm")?,
            bias_gelu: device.function(source, "bias_gelu")?,
            attention: device.function(source, "attention")?,
            pool: device.function(source, "pool")?,
            add_in_place: device.function(source, "add_in_place")?,
            gelu_gate: device.function(source, "gelu_gate")?,
            rotary: device.function(source, "rotary")?,
            exec: Executor::new(device, StreamPriority::Serving)?,
            half: HalfVec::default(),
        })
    }

    /// Copies host values to a new device buffer.
    pub fn upload(&self, host: &[f32]) -> Result<DeviceVec, KernelError> {
        self.exec.upload(host)
    }

    /// A dense layer's weights (`[outputs, inputs]`, in their stored precision) and biases.
    pub fn upload_linear(
        &self,
        weight: HostWeights<'_>,
        bias: &[f32],
        inputs: usize,
        outputs: usize,
    ) -> Result<Linear, KernelError> {
        self.exec.upload_linear(weight, bias, inputs, outputs)
    }

    pub fn upload_norm(
        &self,
        gamma: &[f32],
        beta: &[f32],
        eps: f32,
    ) -> Result<DeviceNorm, KernelError> {
        let up = |v: &[f32]| {
            self.exec
                .stream()
                .clone_htod(v)
                .map_err(KernelError::driver("uploading a layer norm"))
        };
        Ok(DeviceNorm {
            gamma: up(gamma)?,
            beta: up(beta)?,
            eps,
        })
    }

    /// Makes `buf` hold at least `len` values (doubling, so a growing batch reallocates
    /// rarely). What it held is lost when it grows.
    pub fn reserve(&self, buf: &mut DeviceVec, len: usize) -> Result<(), KernelError> {
        self.exec.reserve(buf, len)
    }

    /// Copies `host` into the first values of `buf`, growing it as needed.
    pub fn upload_into(&self, host: &[f32], buf: &mut DeviceVec) -> Result<(), KernelError> {
        self.exec.reserve(buf, host.len())?;
        self.exec.write(host, buf)
    }

    /// Uploads a packed batch: sequence `s` is `ids[offsets[s]..offsets[s + 1]]`.
    pub fn upload_batch(
        &self,
        packed: BatchIds<'_>,
        batch: &mut DeviceBatch,
    ) -> Result<(), KernelError> {
        let BatchIds {
            ids,
            type_ids,
            positions,
            offsets,
        } = packed;
        let tokens = ids.len();
        if type_ids.len() != tokens
            || positions.len() != tokens
            || offsets.first() != Some(&0)
            || offsets.last() != Some(&tokens)
        {
            return Err(KernelError::Shape {
                op: "cuda::upload_batch",
                detail: format!(
                    "{tokens} ids, {} type ids, {} positions, offsets {offsets:?}",
                    type_ids.len(),
                    positions.len()
                ),
            });
        }
        u32_of("cuda::upload_batch", tokens)?;
        let staging = &mut batch.staging;
        staging.clear();
        staging.extend_from_slice(ids);
        staging.extend_from_slice(type_ids);
        staging.extend_from_slice(positions);
        let longest = offsets.windows(2).map(|w| w[1] - w[0]).max().unwrap_or(0);
        staging.extend(offsets.iter().map(|&o| o as u32));
        let stream = self.exec.stream();
        if batch.data.as_ref().is_none_or(|d| d.len() < staging.len()) {
            let len = staging.len().next_power_of_two();
            let data = stream
                .alloc_zeros(len)
                .map_err(KernelError::driver("allocating a batch"))?;
            batch.data = Some(data);
        }
        let data = batch.data.as_mut().expect("allocated above");
        stream
            .memcpy_htod(&staging[..], &mut data.slice_mut(0..staging.len()))
            .map_err(KernelError::driver("uploading a batch"))?;
        batch.tokens = tokens;
        batch.sequences = offsets.len() - 1;
        batch.longest = longest;
        batch.positions_below = positions.iter().max().map_or(0, |&p| p as usize + 1);
        Ok(())
    }

    /// `x[t] = word[id] + position[positions[t]] + token_type[type id]`, without the tables
    /// `tables` leaves out. The caller has checked the ids and type ids against their
    /// tables; the positions are checked here.
    pub fn embed(
        &self,
        batch: &DeviceBatch,
        tables: EmbeddingTables<'_>,
        hidden: usize,
        x: &mut DeviceVec,
    ) -> Result<(), KernelError> {
        let op = "cuda::embed";
        let t = batch.tokens;
        if t == 0 {
            return Ok(());
        }
        let data = batch.data.as_ref().ok_or_else(|| short(op, 0, 3 * t))?;
        let (ids, types, positions) = (
            data.slice(0..t),
            data.slice(t..2 * t),
            data.slice(2 * t..3 * t),
        );
        let word = tables.word.get(op, 0)?;
        let position = (tables.position)
            .map(|p| p.get(op, batch.positions_below * hidden))
            .transpose()?;
        let token_type = tables.token_type.map(|k| k.get(op, 0)).transpose()?;
        let out = x.get_mut(op, t * hidden)?;
        let hidden32 = u32_of(op, hidden)?;
        let null: u64 = 0;
        let mut launch = self.exec.stream().launch_builder(&self.embed);
        launch.arg(&ids).arg(&types).arg(&positions).arg(word);
        match position {
            Some(p) => launch.arg(p),
            None => launch.arg(&null),
        };
        match token_type {
            Some(k) => launch.arg(k),
            None => launch.arg(&null),
        };
        launch.arg(out).arg(&hidden32);
        let cfg = rows_config(t, hidden, 0)?;
        // SAFETY: one block per token reads `hidden` values at rows ids[t], positions[t] and
        // types[t] of the tables it is given (the caller validated ids and types against
        // the tables' sizes; every position is below positions_below, whose rows `get`
        // checked; a null table is not read) and writes row t of x, which holds
        // tokens · hidden values (checked). Arguments match (const uint* x3, const float*
        // x3, float*, uint).
        unsafe { launch.launch(cfg) }
            .map(drop)
            .map_err(launch_error("launching embed"))
    }

    /// `y[rows, out] = x[rows, in] · Wᵀ`, finished as `epilogue` says.
    pub fn dense(
        &mut self,
        layer: &Linear,
        x: &DeviceVec,
        rows: usize,
        y: &mut DeviceVec,
        epilogue: Epilogue,
    ) -> Result<(), KernelError> {
        let op = "cuda::dense";
        let (k, n) = (layer.inputs(), layer.outputs());
        if rows == 0 {
            return Ok(());
        }
        let xs = x.get(op, rows * k)?;
        let ys = y.get_mut(op, rows * n)?;
        match layer.input_dtype() {
            DType::F32 => self
                .exec
                .matmul_slice(layer, SliceActivations::F32(xs), rows, ys)?,
            dtype => {
                let need = rows * k;
                self.exec.reserve(&mut self.half, need)?;
                let half = self.half.get_mut(op, need)?;
                self.exec.convert_slice(xs, need, half, dtype)?;
                self.exec
                    .matmul_slice(layer, SliceActivations::Half(half), rows, ys)?;
            }
        }
        match epilogue {
            Epilogue::None => Ok(()),
            Epilogue::Bias => {
                self.exec
                    .bias_act_slice(layer.bias(), ys, rows, crate::Activation::Identity)
            }
            Epilogue::BiasGelu => self.bias_gelu(layer, ys, rows),
        }
    }

    fn bias_gelu(
        &self,
        layer: &Linear,
        y: &mut CudaSlice<f32>,
        rows: usize,
    ) -> Result<(), KernelError> {
        let op = "cuda::bias_gelu";
        let cols = layer.outputs();
        let (r, c) = (u32_of(op, rows)?, u32_of(op, cols)?);
        let mut launch = self.exec.stream().launch_builder(&self.bias_gelu);
        launch.arg(y).arg(layer.bias()).arg(&r).arg(&c);
        // SAFETY: y holds rows · cols values (checked by `dense`), the bias `cols` (it was
        // uploaded with the layer); arguments match (float*, const float*, uint, uint).
        unsafe { launch.launch(elementwise(rows * cols)) }
            .map(drop)
            .map_err(launch_error("launching bias_gelu"))
    }

    /// `x[r] = LayerNorm(x[r] + residual[r] + residual bias)` over `rows` rows of the
    /// norm's width, in place; without a residual, of `x[r]` alone.
    pub fn add_layer_norm(
        &self,
        x: &mut DeviceVec,
        residual: Option<Residual<'_>>,
        norm: &DeviceNorm,
        rows: usize,
    ) -> Result<(), KernelError> {
        let op = "cuda::add_layer_norm";
        let width = norm.gamma.len();
        if rows == 0 {
            return Ok(());
        }
        let xs = x.get_mut(op, rows * width)?;
        let null: u64 = 0;
        let width32 = u32_of(op, width)?;
        let mut launch = self.exec.stream().launch_builder(&self.add_layer_norm);
        launch.arg(xs);
        match &residual {
            Some(r) => {
                if r.layer.outputs() != width {
                    return Err(KernelError::Shape {
                        op,
                        detail: format!(
                            "a residual of width {} for a norm of {width}",
                            r.layer.outputs()
                        ),
                    });
                }
                launch
                    .arg(r.output.get(op, rows * width)?)
                    .arg(r.layer.bias());
            }
            None => {
                launch.arg(&null).arg(&null);
            }
        }
        launch
            .arg(&norm.gamma)
            .arg(&norm.beta)
            .arg(&width32)
            .arg(&norm.eps);
        let cfg = rows_config(rows, ROW_THREADS as usize, 0)?;
        // SAFETY: one block per row reads and writes `width` values of row r of x and reads
        // row r of the residual and `width` biases, gamma and beta values (all checked or
        // sized with the norm); null pointers stand for an absent residual, as the kernel
        // expects. Arguments match (float*, const float* x4, uint, float).
        unsafe { launch.launch(cfg) }
            .map(drop)
            .map_err(launch_error("launching add_layer_norm"))
    }

    /// `ctx[tokens, hidden]` = multi-head attention of every sequence of the batch over
    /// itself, from `qkv[tokens, 3 · hidden]` (queries, keys, values), as `spec` says.
    pub fn attention(
        &self,
        qkv: &DeviceVec,
        batch: &DeviceBatch,
        spec: AttentionSpec<'_>,
        ctx: &mut DeviceVec,
    ) -> Result<(), KernelError> {
        let op = "cuda::attention";
        let t = batch.tokens;
        if t == 0 {
            return Ok(());
        }
        check_attention(spec, batch)?;
        let AttentionSpec {
            shape,
            bias,
            window,
        } = spec;
        let AttentionShape { hidden, heads } = shape;
        // NO_WINDOW in encoder.cu. A window as wide as the longest sequence holds every key
        // (wider ones change nothing), and that fits 32 bits (`upload_batch` checked).
        let window = window.map_or(u32::MAX, |w| w.min(batch.longest) as u32);
        let d = hidden / heads;
        let data = batch.data.as_ref().ok_or_else(|| short(op, 0, 3 * t))?;
        let offsets = data.slice(3 * t..3 * t + batch.sequences + 1);
        let (qkv, out) = (qkv.get(op, t * 3 * hidden)?, ctx.get_mut(op, t * hidden)?);
        let (hidden32, d32) = (u32_of(op, hidden)?, u32_of(op, d)?);
        let scale = 1.0 / (d as f32).sqrt();
        // Without a bias the kernel reads no table (span 0); qkv stands in for its pointer.
        let (table, span) = match bias {
            Some(b) => (
                b.table.get(op, heads * (2 * b.span - 1))?,
                u32_of(op, b.span)?,
            ),
            None => (qkv, 0),
        };
        let mut launch = self.exec.stream().launch_builder(&self.attention);
        launch
            .arg(qkv)
            .arg(&offsets)
            .arg(out)
            .arg(&hidden32)
            .arg(&d32)
            .arg(&scale)
            .arg(table)
            .arg(&span)
            .arg(&window);
        let shared = (2 * ATT_KEYS * (d + 1) + ATT_QUERIES * d) * std::mem::size_of::<f32>();
        let cfg = LaunchConfig {
            grid_dim: (
                u32_of(op, batch.longest.div_ceil(ATT_QUERIES))?,
                heads as u32,
                batch.sequences as u32,
            ),
            block_dim: (32 * ATT_WARPS, 1, 1),
            shared_mem_bytes: shared as u32,
        };
        // SAFETY: the offsets were uploaded with the batch and bound every sequence inside
        // its tokens; each block reads rows of qkv (tokens · 3 · hidden values, checked)
        // within its sequence and writes its queries' rows of ctx at its head's columns
        // (tokens · hidden, checked); a bias table holds heads · (2 · span − 1) values
        // (checked) with span at least the longest sequence (`check_attention`), so every
        // index head · (2·span − 1) + span − 1 + j − i lies in it; d <= 64 keeps the dynamic
        // shared memory (sized as the kernel lays it out) under 48 KB. Arguments match
        // (const float*, const uint*, float*, uint, uint, float, const float*, uint, uint).
        unsafe { launch.launch(cfg) }
            .map(drop)
            .map_err(launch_error("launching attention"))
    }

    /// `out[s]` = the mean of sequence `s`'s rows of `x`, or its first row with `cls`.
    pub fn pool(
        &self,
        x: &DeviceVec,
        batch: &DeviceBatch,
        hidden: usize,
        cls: bool,
        out: &mut DeviceVec,
    ) -> Result<(), KernelError> {
        let op = "cuda::pool";
        let (t, s) = (batch.tokens, batch.sequences);
        if s == 0 {
            return Ok(());
        }
        let data = batch.data.as_ref().ok_or_else(|| short(op, 0, 3 * t))?;
        let offsets = data.slice(3 * t..3 * t + s + 1);
        let (xs, os) = (x.get(op, t * hidden)?, out.get_mut(op, s * hidden)?);
        let (hidden32, cls) = (u32_of(op, hidden)?, cls as i32);
        let mut launch = self.exec.stream().launch_builder(&self.pool);
        launch
            .arg(xs)
            .arg(&offsets)
            .arg(os)
            .arg(&hidden32)
            .arg(&cls);
        let cfg = rows_config(s, hidden, 0)?;
        // SAFETY: one block per sequence reads its rows of x (inside the batch's tokens,
        // tokens · hidden values, checked) and writes row s of out (sequences · hidden,
        // checked). Arguments match (const float*, const uint*, float*, uint, int).
        unsafe { launch.launch(cfg) }
            .map(drop)
            .map_err(launch_error("launching pool"))
    }

    /// Copies the first `host.len()` values of `src` to the host, once everything queued
    /// before has run.
    pub fn download(&self, src: &DeviceVec, host: &mut [f32]) -> Result<(), KernelError> {
        self.exec.read(src, host)
    }
}

/// The heads and a bias table's span that [`EncoderOps::attention`] can run.
fn check_attention(spec: AttentionSpec<'_>, batch: &DeviceBatch) -> Result<(), KernelError> {
    let AttentionSpec { shape, bias, .. } = spec;
    let AttentionShape { hidden, heads } = shape;
    let fail = |detail| {
        Err(KernelError::Shape {
            op: "cuda::attention",
            detail,
        })
    };
    if heads == 0 || !hidden.is_multiple_of(heads) || hidden / heads > ATT_MAX_DIM {
        return fail(format!(
            "{heads} heads of {hidden}: head sizes up to {ATT_MAX_DIM} run on CUDA"
        ));
    }
    if heads > MAX_GRID_YZ || batch.sequences > MAX_GRID_YZ {
        return fail(format!(
            "{} sequences x {heads} heads exceed a grid",
            batch.sequences
        ));
    }
    match bias {
        Some(b) if b.span < batch.longest.max(1) => fail(format!(
            "a relative bias over {} positions for sequences of up to {} tokens",
            b.span, batch.longest
        )),
        _ => Ok(()),
    }
}

/// One block per row (`rows` > 0 of them), threads for `width` values in whole warps, at
/// most 256.
fn rows_config(rows: usize, width: usize, shared: u32) -> Result<LaunchConfig, KernelError> {
    let threads = width.div_ceil(32).clamp(1, 8) as u32 * 32;
    Ok(LaunchConfig {
        grid_dim: (u32_of("cuda rows", rows)?, 1, 1),
        block_dim: (threads, 1, 1),
        shared_mem_bytes: shared,
    })
}
