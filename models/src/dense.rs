//! A dense layer's weights as read from a checkpoint, shared by the encoders' and the
//! decoders' readers and layers: the matrix in its stored precision and its biases, several
//! stacked into one product, and laid out for the CPU's kernels.

use kernels::DType;
use kernels::cpu::{MatmulPrecision, PackedLinear};

use crate::{LoadError, WeightData};

/// A matrix `[outputs, inputs]` (PyTorch's `nn.Linear` layout) and its biases.
#[derive(Clone, Debug, PartialEq)]
pub struct Dense {
    pub inputs: usize,
    pub outputs: usize,
    pub weight: WeightData,
    pub bias: Vec<f32>,
}

/// Matrices with the same input width, one above the other, in their common precision
/// when they share one and f32 otherwise.
pub(crate) fn stack(parts: &[Dense]) -> Dense {
    let dtypes: Vec<DType> = parts.iter().map(|d| d.weight.dtype()).collect();
    let weight = match dtypes[0] {
        DType::F16 if dtypes.iter().all(|d| *d == DType::F16) => WeightData::F16(
            parts
                .iter()
                .flat_map(|d| match &d.weight {
                    WeightData::F16(w) => w.clone(),
                    _ => unreachable!("all f16, checked above"),
                })
                .collect(),
        ),
        DType::BF16 if dtypes.iter().all(|d| *d == DType::BF16) => WeightData::BF16(
            parts
                .iter()
                .flat_map(|d| match &d.weight {
                    WeightData::BF16(w) => w.clone(),
                    _ => unreachable!("all bf16, checked above"),
                })
                .collect(),
        ),
        _ => WeightData::F32(parts.iter().flat_map(|d| d.weight.to_f32()).collect()),
    };
    Dense {
        inputs: parts[0].inputs,
        outputs: parts.iter().map(|d| d.outputs).sum(),
        weight,
        bias: parts.iter().flat_map(|d| d.bias.iter().copied()).collect(),
    }
}

/// A dense layer's weights laid out in panels for the CPU's kernels, for f32 products.
pub(crate) fn packed(d: &Dense) -> Result<PackedLinear, LoadError> {
    packed_for(d, MatmulPrecision::F32)
}

/// A dense layer's weights laid out in panels for products in `precision`.
pub(crate) fn packed_for(d: &Dense, precision: MatmulPrecision) -> Result<PackedLinear, LoadError> {
    Ok(PackedLinear::with_precision(
        d.weight.host(),
        &d.bias,
        d.inputs,
        d.outputs,
        precision,
    )?)
}
