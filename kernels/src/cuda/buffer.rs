//! Device buffers that callers hold without seeing cudarc: f32 values ([`DeviceVec`]), the
//! raw bits of 16-bit values ([`HalfVec`]) and indices ([`DeviceIndices`]). A buffer is
//! empty until an executor sizes it ([`super::linear::Executor::reserve`]) and knows only
//! its capacity; the ops check every length they rely on before they touch it.
//!
//! A buffer is used on the stream that allocated it and freed there (stream-ordered), so
//! that no buffer needs cross-stream events (see [`super::CudaDevice::open`]).

use cudarc::driver::{CudaSlice, DeviceRepr};

use crate::KernelError;

/// Values of `T` on one device. Holds at least what the last op that wrote it produced;
/// its capacity may be larger.
pub struct DeviceBuffer<T> {
    data: Option<CudaSlice<T>>,
}

/// f32 values: weights, or activations `[rows, width]` row-major.
pub type DeviceVec = DeviceBuffer<f32>;
/// 16-bit values (f16 or bf16, as the op that reads them is told), as their bits.
pub type HalfVec = DeviceBuffer<u16>;
/// Indices: labels, token ids.
pub type DeviceIndices = DeviceBuffer<u32>;

impl<T> Default for DeviceBuffer<T> {
    fn default() -> Self {
        DeviceBuffer { data: None }
    }
}

impl<T> DeviceBuffer<T> {
    pub(crate) fn from_slice(data: CudaSlice<T>) -> Self {
        DeviceBuffer { data: Some(data) }
    }

    /// Values the buffer can hold.
    pub fn capacity(&self) -> usize {
        self.data.as_ref().map_or(0, |d| d.len())
    }

    /// Device memory the buffer holds, in bytes.
    pub fn bytes(&self) -> usize {
        self.capacity() * std::mem::size_of::<T>()
    }

    /// Frees the device memory, in order on the stream that allocated it: work queued
    /// before still sees it.
    pub fn release(&mut self) {
        self.data = None;
    }

    pub(crate) fn set(&mut self, data: CudaSlice<T>) {
        self.data = Some(data);
    }
}

impl<T: DeviceRepr> DeviceBuffer<T> {
    /// The slice, if it holds at least `need` values.
    pub(crate) fn get(&self, op: &'static str, need: usize) -> Result<&CudaSlice<T>, KernelError> {
        match &self.data {
            Some(d) if d.len() >= need => Ok(d),
            _ => Err(short(op, self.capacity(), need)),
        }
    }

    pub(crate) fn get_mut(
        &mut self,
        op: &'static str,
        need: usize,
    ) -> Result<&mut CudaSlice<T>, KernelError> {
        let capacity = self.capacity();
        match &mut self.data {
            Some(d) if capacity >= need => Ok(d),
            _ => Err(short(op, capacity, need)),
        }
    }
}

pub(crate) fn short(op: &'static str, have: usize, need: usize) -> KernelError {
    KernelError::Shape {
        op,
        detail: format!("device buffer holds {have} values, {need} needed"),
    }
}
