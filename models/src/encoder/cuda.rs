//! The encoder on a GPU (placeholder while the CPU path lands).

use std::sync::Arc;

use kernels::KernelError;
use kernels::cuda::CudaDevice;

use super::config::EncoderConfig;
use super::packed::PackedTokens;
use super::weights::EncoderWeights;
use crate::{LoadError, ModelError};

pub(super) struct CudaEncoder;

impl CudaEncoder {
    pub(super) fn new(
        _config: &EncoderConfig,
        _weights: &EncoderWeights,
        device: Arc<CudaDevice>,
    ) -> Result<Self, LoadError> {
        Err(LoadError::Device(KernelError::CudaUnavailable(format!(
            "the text encoder does not run on {} yet",
            device.describe()
        ))))
    }

    pub(super) fn forward(&mut self, _: &PackedTokens, _: &mut [f32]) -> Result<(), ModelError> {
        unreachable!("never constructed")
    }
}
