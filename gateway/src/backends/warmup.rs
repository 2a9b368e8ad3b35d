//! The inputs of Triton's `model_warmup` requests: zeros, random values, or a file of the
//! input's raw bytes in the model's `warmup/` folder, as Triton reads them.

use std::path::Path;

use seam::{Buffer, DataType, Tensor, TensorData};

use crate::triton::config::WarmupInput;
use crate::triton::mapping;

/// Warm-up inputs larger than this are refused: a configuration must not make a load
/// allocate without bound. A BYTES element counts its own bytes and its `Vec`'s.
const MAX_BYTES: usize = 256 << 20;

/// A warm-up request runs at most this many times.
pub const MAX_COUNT: u32 = 1000;

/// One warm-up input of `batch_size` rows (where the model batches).
pub fn tensor(
    name: &str,
    input: &WarmupInput,
    batch_size: u32,
    batched: bool,
    model_dir: &Path,
) -> Result<Tensor, String> {
    let dtype = mapping::datatype(&input.data_type).ok_or_else(|| {
        format!(
            "input {name:?}: data_type {:?} is not served",
            input.data_type
        )
    })?;
    let dims = input
        .dims
        .iter()
        .map(|&d| {
            usize::try_from(d)
                .map_err(|_| format!("input {name:?}: dims {:?} must be sizes", input.dims))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let rows = batched.then_some(batch_size.max(1) as usize);
    let shape: Vec<usize> = rows.into_iter().chain(dims).collect();
    let elements = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
    let element_bytes = dtype.size().unwrap_or(std::mem::size_of::<Vec<u8>>());
    let bytes = elements.and_then(|n| n.checked_mul(element_bytes));
    if bytes.is_none_or(|b| b > MAX_BYTES) {
        return Err(format!(
            "input {name:?}: shape {shape:?} is larger than {MAX_BYTES} bytes"
        ));
    }
    let mut t = Tensor::zeros(name, dtype, shape);
    if !input.input_data_file.is_empty() {
        let file = model_dir.join("warmup").join(&input.input_data_file);
        let data =
            std::fs::read(&file).map_err(|e| format!("input {name:?}: {}: {e}", file.display()))?;
        fill_from_file(&mut t, &data)
            .map_err(|e| format!("input {name:?}: {}: {e}", file.display()))?;
    } else if input.random_data {
        fill_random(&mut t);
    }
    Ok(t)
}

/// Raw bytes of a fixed-size type, repeated for every row; BYTES elements each after a
/// 4-byte little-endian length.
fn fill_from_file(t: &mut Tensor, data: &[u8]) -> Result<(), String> {
    match &mut t.data {
        TensorData::Fixed(buffer) => {
            let row = buffer.len() / t.shape.first().copied().unwrap_or(1).max(1);
            let whole = data.len() == buffer.len();
            if !whole && data.len() != row {
                return Err(format!(
                    "{} bytes, where the input takes {} (or {row} a row)",
                    data.len(),
                    buffer.len()
                ));
            }
            let bytes = buffer.as_bytes_mut();
            for chunk in bytes.chunks_mut(data.len().max(1)) {
                chunk.copy_from_slice(&data[..chunk.len()]);
            }
            Ok(())
        }
        TensorData::Bytes(items) => {
            let longest = data.len().saturating_mul(items.len());
            if longest > MAX_BYTES {
                return Err(format!(
                    "{} elements of up to {} bytes are more than {MAX_BYTES} bytes",
                    items.len(),
                    data.len()
                ));
            }
            let (mut rest, mut read) = (data, Vec::new());
            while let Some((len, tail)) = rest.split_first_chunk::<4>() {
                let len = u32::from_le_bytes(*len) as usize;
                let item = tail.get(..len).ok_or("an element longer than the file")?;
                read.push(item.to_vec());
                rest = &tail[len..];
            }
            for (i, item) in items.iter_mut().enumerate() {
                *item = read.get(i % read.len().max(1)).cloned().unwrap_or_default();
            }
            Ok(())
        }
    }
}

/// Values every type holds (floats in [-1, 1), small integers, booleans), from a fixed seed:
/// a warm-up that is the same each load.
fn fill_random(t: &mut Tensor) {
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let TensorData::Fixed(buffer) = &mut t.data else {
        return;
    };
    let size = t.dtype.size().unwrap_or(1);
    let mut out = Buffer::zeroed(buffer.len());
    for chunk in out.as_bytes_mut().chunks_mut(size) {
        let r = next();
        let unit = (r >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
        match t.dtype {
            DataType::Fp32 => chunk.copy_from_slice(&(unit as f32).to_le_bytes()),
            DataType::Fp64 => chunk.copy_from_slice(&unit.to_le_bytes()),
            DataType::Fp16 => chunk.copy_from_slice(&half::f16::from_f64(unit).to_le_bytes()),
            DataType::Bf16 => chunk.copy_from_slice(&half::bf16::from_f64(unit).to_le_bytes()),
            DataType::Bool => chunk[0] = (r & 1) as u8,
            _ => chunk[0] = (r % 8) as u8,
        }
    }
    *buffer = out;
}
