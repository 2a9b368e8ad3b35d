//! The ops ModernBERT's layers add to BERT's on a GPU: a copy (its layers norm a copy of
//! the residual stream, which they keep), a residual sum, rotary positions and the gated
//! GELU of its feed-forward. Attention within a sliding window is
//! [`EncoderOps::attention`]'s `window`.

use cudarc::driver::PushKernelArg;

use super::{DeviceBatch, DeviceVec, EncoderOps, launch_error, rows_config, short, u32_of};
use crate::KernelError;
use crate::cuda::linear::elementwise;

/// Rotary cosines and sines on the device, `[position][head_dim / 2]` each, as the host
/// computed them.
#[derive(Default)]
pub struct RotaryTables {
    pub cos: DeviceVec,
    pub sin: DeviceVec,
}

impl EncoderOps {
    /// `dst[..len] = src[..len]`.
    pub fn copy(
        &self,
        src: &DeviceVec,
        dst: &mut DeviceVec,
        len: usize,
    ) -> Result<(), KernelError> {
        let op = "cuda::copy";
        if len == 0 {
            return Ok(());
        }
        let src = src.get(op, len)?.slice(0..len);
        let mut dst = dst.get_mut(op, len)?.slice_mut(0..len);
        self.exec
            .stream()
            .memcpy_dtod(&src, &mut dst)
            .map_err(KernelError::driver("copying on the device"))
    }

    /// `x[..rows · cols] += y[..rows · cols]`.
    pub fn add_in_place(
        &self,
        x: &mut DeviceVec,
        y: &DeviceVec,
        rows: usize,
        cols: usize,
    ) -> Result<(), KernelError> {
        let op = "cuda::add_in_place";
        let n = rows * cols;
        if n == 0 {
            return Ok(());
        }
        let (xs, ys) = (x.get_mut(op, n)?, y.get(op, n)?);
        let (r, c) = (u32_of(op, rows)?, u32_of(op, cols)?);
        let mut launch = self.exec.stream().launch_builder(&self.add_in_place);
        launch.arg(xs).arg(ys).arg(&r).arg(&c);
        // SAFETY: x and y hold rows · cols values (checked); arguments match (float*,
        // const float*, uint, uint).
        unsafe { launch.launch(elementwise(n)) }
            .map(drop)
            .map_err(launch_error("launching add_in_place"))
    }

    /// `gated[r, c] = gelu(up[r, c]) · up[r, inter + c]` for `rows` rows of `up`, each
    /// `2 · inter` wide.
    pub fn gelu_gate(
        &self,
        up: &DeviceVec,
        gated: &mut DeviceVec,
        rows: usize,
        inter: usize,
    ) -> Result<(), KernelError> {
        let op = "cuda::gelu_gate";
        let n = rows * inter;
        if n == 0 {
            return Ok(());
        }
        let (ups, out) = (up.get(op, 2 * n)?, gated.get_mut(op, n)?);
        let (r, i) = (u32_of(op, rows)?, u32_of(op, inter)?);
        let mut launch = self.exec.stream().launch_builder(&self.gelu_gate);
        launch.arg(ups).arg(out).arg(&r).arg(&i);
        // SAFETY: up holds rows · 2 · inter values and gated rows · inter (checked);
        // arguments match (const float*, float*, uint, uint).
        unsafe { launch.launch(elementwise(n)) }
            .map(drop)
            .map_err(launch_error("launching gelu_gate"))
    }

    /// Turns each head's query and key in `qkv[tokens, 3 · hidden]` by its token's position
    /// (the batch's positions), with `tables` (rows for every position of the batch).
    pub fn rotary(
        &self,
        qkv: &mut DeviceVec,
        batch: &DeviceBatch,
        tables: &RotaryTables,
        hidden: usize,
        head_dim: usize,
    ) -> Result<(), KernelError> {
        let op = "cuda::rotary";
        let t = batch.tokens;
        if t == 0 {
            return Ok(());
        }
        if head_dim == 0 || !head_dim.is_multiple_of(2) || !hidden.is_multiple_of(head_dim) {
            return Err(KernelError::Shape {
                op,
                detail: format!("heads of {head_dim} values in {hidden}"),
            });
        }
        let values = batch.positions_below * head_dim / 2;
        let (cos, sin) = (tables.cos.get(op, values)?, tables.sin.get(op, values)?);
        let data = batch.data.as_ref().ok_or_else(|| short(op, 0, 3 * t))?;
        let positions = data.slice(2 * t..3 * t);
        let qkvs = qkv.get_mut(op, t * 3 * hidden)?;
        let (hidden32, d32) = (u32_of(op, hidden)?, u32_of(op, head_dim)?);
        let mut launch = self.exec.stream().launch_builder(&self.rotary);
        launch
            .arg(qkvs)
            .arg(&positions)
            .arg(cos)
            .arg(sin)
            .arg(&hidden32)
            .arg(&d32);
        // SAFETY: one block per token rewrites the first 2 · hidden values of its row of
        // qkv (tokens · 3 · hidden, checked) and reads head_dim / 2 values of the tables at
        // its position, below positions_below (values checked). Arguments match (float*,
        // const uint*, const float*, const float*, uint, uint).
        unsafe { launch.launch(rows_config(t, hidden, 0)?) }
            .map(drop)
            .map_err(launch_error("launching rotary"))
    }
}
