//! Between seam tensors and ONNX Runtime's values: inputs are views of the request's bytes
//! where the element type allows (no copy), outputs are copied out once.

use ort::session::SessionInputValue;
use ort::value::{DynValue, TensorElementType, TensorRef, ValueType};
use seam::{Buffer, DataType, Tensor, TensorData, TensorSpec};

use crate::OnnxError;

/// The protocol's datatype of an ONNX element type, if tandem serves it.
pub fn datatype(ty: TensorElementType) -> Option<DataType> {
    Some(match ty {
        TensorElementType::Bool => DataType::Bool,
        TensorElementType::Uint8 => DataType::Uint8,
        TensorElementType::Uint16 => DataType::Uint16,
        TensorElementType::Uint32 => DataType::Uint32,
        TensorElementType::Uint64 => DataType::Uint64,
        TensorElementType::Int8 => DataType::Int8,
        TensorElementType::Int16 => DataType::Int16,
        TensorElementType::Int32 => DataType::Int32,
        TensorElementType::Int64 => DataType::Int64,
        TensorElementType::Float16 => DataType::Fp16,
        TensorElementType::Bfloat16 => DataType::Bf16,
        TensorElementType::Float32 => DataType::Fp32,
        TensorElementType::Float64 => DataType::Fp64,
        TensorElementType::String => DataType::Bytes,
        _ => return None,
    })
}

/// A graph input or output as a spec of its whole shape (`-1` for a dimension the graph
/// leaves open, named or not).
pub fn spec(name: &str, ty: &ValueType, role: &str) -> Result<TensorSpec, OnnxError> {
    let ValueType::Tensor { ty, shape, .. } = ty else {
        return Err(OnnxError::Unsupported(format!(
            "{role} {name:?} is a {ty}, not a tensor; only tensors are served"
        )));
    };
    let dtype = datatype(*ty).ok_or_else(|| {
        OnnxError::Unsupported(format!(
            "{role} {name:?} has element type {ty:?}, which tandem does not serve"
        ))
    })?;
    Ok(TensorSpec {
        name: name.to_string(),
        dtype,
        dims: shape.iter().map(|&d| if d < 0 { -1 } else { d }).collect(),
        optional: false,
    })
}

fn dims(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&d| d as i64).collect()
}

fn typed<'a, T: bytemuck::Pod + ort::value::PrimitiveTensorElementType + std::fmt::Debug>(
    t: &'a Tensor,
    shape: &[usize],
    bytes: &'a Buffer,
) -> Result<SessionInputValue<'a>, OnnxError> {
    let values: &[T] = bytes.as_slice().ok_or_else(|| {
        OnnxError::Run(format!("input {:?}: bytes are not whole elements", t.name))
    })?;
    let view = TensorRef::from_array_view((dims(shape), values))
        .map_err(|e| OnnxError::Run(format!("input {:?}: {e}", t.name)))?;
    Ok(view.into())
}

/// An input as ONNX Runtime reads it, in `shape` (its own, or another of as many elements).
pub fn input<'a>(t: &'a Tensor, shape: &[usize]) -> Result<SessionInputValue<'a>, OnnxError> {
    let bytes = match &t.data {
        TensorData::Bytes(items) => return strings(t, shape, items),
        TensorData::Fixed(b) => b,
    };
    match t.dtype {
        DataType::Bool => booleans(t, shape, bytes),
        DataType::Uint8 => typed::<u8>(t, shape, bytes),
        DataType::Uint16 => typed::<u16>(t, shape, bytes),
        DataType::Uint32 => typed::<u32>(t, shape, bytes),
        DataType::Uint64 => typed::<u64>(t, shape, bytes),
        DataType::Int8 => typed::<i8>(t, shape, bytes),
        DataType::Int16 => typed::<i16>(t, shape, bytes),
        DataType::Int32 => typed::<i32>(t, shape, bytes),
        DataType::Int64 => typed::<i64>(t, shape, bytes),
        DataType::Fp16 => typed::<half::f16>(t, shape, bytes),
        DataType::Bf16 => typed::<half::bf16>(t, shape, bytes),
        DataType::Fp32 => typed::<f32>(t, shape, bytes),
        DataType::Fp64 => typed::<f64>(t, shape, bytes),
        DataType::Bytes => Err(OnnxError::Run(format!(
            "input {:?}: BYTES without its strings",
            t.name
        ))),
    }
}

/// Booleans are bytes that must be 0 or 1 (any other byte is no `bool`): copied, checked.
fn booleans<'a>(
    t: &'a Tensor,
    shape: &[usize],
    bytes: &Buffer,
) -> Result<SessionInputValue<'a>, OnnxError> {
    let values = bytes
        .as_bytes()
        .iter()
        .map(|&b| match b {
            0 | 1 => Ok(b == 1),
            other => Err(OnnxError::Run(format!(
                "input {:?}: {other} is not a BOOL (0 or 1)",
                t.name
            ))),
        })
        .collect::<Result<Vec<bool>, _>>()?;
    let value = ort::value::Tensor::from_array((dims(shape), values))
        .map_err(|e| OnnxError::Run(format!("input {:?}: {e}", t.name)))?;
    Ok(value.into())
}

/// ONNX strings are UTF-8 text.
fn strings<'a>(
    t: &'a Tensor,
    shape: &[usize],
    items: &[Vec<u8>],
) -> Result<SessionInputValue<'a>, OnnxError> {
    let texts = items
        .iter()
        .enumerate()
        .map(|(i, b)| {
            String::from_utf8(b.clone()).map_err(|e| {
                OnnxError::Run(format!("input {:?}: element {i} is not UTF-8: {e}", t.name))
            })
        })
        .collect::<Result<Vec<String>, _>>()?;
    let value = ort::value::Tensor::from_string_array((dims(shape), texts.as_slice()))
        .map_err(|e| OnnxError::Run(format!("input {:?}: {e}", t.name)))?;
    Ok(value.into())
}

fn copy_out<T: bytemuck::Pod + ort::value::PrimitiveTensorElementType>(
    name: &str,
    value: &DynValue,
) -> Result<(Vec<usize>, TensorData), OnnxError> {
    let (shape, values) = value
        .try_extract_tensor::<T>()
        .map_err(|e| OnnxError::Run(format!("output {name:?}: {e}")))?;
    let shape = shape.iter().map(|&d| d.max(0) as usize).collect();
    let bytes = Buffer::from_bytes(bytemuck::cast_slice(values));
    Ok((shape, TensorData::Fixed(bytes)))
}

/// An output as a seam tensor of its protocol type.
pub fn output(name: &str, value: &DynValue) -> Result<Tensor, OnnxError> {
    let ValueType::Tensor { ty, .. } = value.dtype() else {
        return Err(OnnxError::Run(format!("output {name:?} is not a tensor")));
    };
    let dtype = datatype(*ty)
        .ok_or_else(|| OnnxError::Run(format!("output {name:?} has element type {ty:?}")))?;
    let (shape, data) = match dtype {
        DataType::Bool => {
            let (shape, values) = value
                .try_extract_tensor::<bool>()
                .map_err(|e| OnnxError::Run(format!("output {name:?}: {e}")))?;
            let bytes: Vec<u8> = values.iter().map(|&b| b as u8).collect();
            let shape = shape.iter().map(|&d| d.max(0) as usize).collect();
            (shape, TensorData::Fixed(Buffer::from_bytes(&bytes)))
        }
        DataType::Uint8 => copy_out::<u8>(name, value)?,
        DataType::Uint16 => copy_out::<u16>(name, value)?,
        DataType::Uint32 => copy_out::<u32>(name, value)?,
        DataType::Uint64 => copy_out::<u64>(name, value)?,
        DataType::Int8 => copy_out::<i8>(name, value)?,
        DataType::Int16 => copy_out::<i16>(name, value)?,
        DataType::Int32 => copy_out::<i32>(name, value)?,
        DataType::Int64 => copy_out::<i64>(name, value)?,
        DataType::Fp16 => copy_out::<half::f16>(name, value)?,
        DataType::Bf16 => copy_out::<half::bf16>(name, value)?,
        DataType::Fp32 => copy_out::<f32>(name, value)?,
        DataType::Fp64 => copy_out::<f64>(name, value)?,
        DataType::Bytes => {
            let (shape, texts) = value
                .try_extract_strings()
                .map_err(|e| OnnxError::Run(format!("output {name:?}: {e}")))?;
            let shape = shape.iter().map(|&d| d.max(0) as usize).collect();
            (
                shape,
                TensorData::Bytes(texts.into_iter().map(String::into_bytes).collect()),
            )
        }
    };
    Ok(Tensor {
        name: name.to_string(),
        dtype,
        shape,
        data,
    })
}
