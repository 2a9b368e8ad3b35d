//! Named, typed tensors (an ONNX model's): every input the signature requires, each of its
//! exact datatype and of a shape its dims accept, the batching ones sharing one row count
//! within `max_batch_size`; values from JSON (exact for their type) or the binary extension.

use seam::{Buffer, DataType, Signature, Tensor, TensorData, TensorSpec};

use super::{ValidInput, invalid};
use crate::config::ModelSettings;
use crate::protocol::{InputTensor, RequestError, binary};

/// The inputs as tensors, and the binary section left after them.
pub fn validate<'a>(
    inputs: Vec<InputTensor>,
    mut section: &'a [u8],
    signature: &Signature,
    settings: &ModelSettings,
) -> Result<(ValidInput, &'a [u8]), RequestError> {
    check_names(&inputs, signature)?;
    let mut tensors = Vec::with_capacity(inputs.len());
    let mut rows = None;
    for input in inputs {
        let spec = signature.input(&input.name).expect("names were checked");
        let shape = shape(&input, spec, signature.batched)?;
        if signature.batched {
            let r = shape[0];
            match rows {
                Some(first) if first != r => {
                    return Err(invalid(format!(
                        "input {:?}: {r} rows, where the inputs before it have {first}; every \
                         input of a request holds the same number of rows",
                        input.name
                    )));
                }
                _ => rows = Some(r),
            }
        }
        let (data, rest) = values(
            input.data,
            input.parameters.binary_data_size,
            section,
            spec,
            &shape,
        )?;
        section = rest;
        tensors.push(Tensor {
            name: input.name,
            dtype: spec.dtype,
            shape,
            data,
        });
    }
    let rows = rows.unwrap_or(1);
    if rows > settings.max_batch_size {
        return Err(invalid(format!(
            "inputs hold {rows} rows, more than the model's max_batch_size of {}",
            settings.max_batch_size
        )));
    }
    Ok((ValidInput::Tensors { tensors, rows }, section))
}

/// Each input once, each known, every required one there.
fn check_names(inputs: &[InputTensor], signature: &Signature) -> Result<(), RequestError> {
    let expected = || {
        signature
            .inputs
            .iter()
            .map(|t| {
                format!(
                    "{:?} {} {:?}",
                    t.name,
                    t.dtype,
                    t.protocol_shape(signature.batched)
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (i, input) in inputs.iter().enumerate() {
        if signature.input(&input.name).is_none() {
            return Err(invalid(format!(
                "inputs: unknown input {:?}; the model takes {}",
                input.name,
                expected()
            )));
        }
        if inputs[..i].iter().any(|o| o.name == input.name) {
            return Err(invalid(format!("inputs: {:?} is given twice", input.name)));
        }
    }
    for spec in signature.inputs.iter().filter(|s| !s.optional) {
        if !inputs.iter().any(|i| i.name == spec.name) {
            return Err(invalid(format!(
                "inputs: {:?} is missing; the model takes {}",
                spec.name,
                expected()
            )));
        }
    }
    Ok(())
}

/// The input's shape, checked against its spec: a batch dimension of at least one row first
/// where the model batches, then dims the spec accepts.
fn shape(
    input: &InputTensor,
    spec: &TensorSpec,
    batched: bool,
) -> Result<Vec<usize>, RequestError> {
    let name = &input.name;
    let given = DataType::parse(&input.datatype);
    if given != Some(spec.dtype) {
        return Err(invalid(format!(
            "input {name:?}: datatype {:?} does not match the model's {}",
            input.datatype, spec.dtype
        )));
    }
    let expected = spec.protocol_shape(batched);
    let wrong = || {
        invalid(format!(
            "input {name:?}: shape {:?} does not match the model's {expected:?} (-1: any size{})",
            input.shape,
            if batched {
                ", the first at least 1 and at most max_batch_size"
            } else {
                ""
            }
        ))
    };
    if input.shape.iter().any(|&d| d < 0) {
        return Err(wrong());
    }
    let shape: Vec<usize> = input.shape.iter().map(|&d| d as usize).collect();
    let (rows_ok, rest) = match (batched, shape.split_first()) {
        (true, Some((&rows, rest))) => (rows >= 1, rest),
        (true, None) => (false, &shape[..]),
        (false, _) => (true, &shape[..]),
    };
    if !rows_ok || !spec.accepts(rest) {
        return Err(wrong());
    }
    shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| {
            invalid(format!(
                "input {name:?}: shape {shape:?} holds too many elements"
            ))
        })?;
    Ok(shape)
}

/// The input's values, from JSON `data` or its bytes at the front of the binary section.
fn values<'a>(
    data: Option<crate::protocol::JsonData>,
    binary_size: Option<u64>,
    section: &'a [u8],
    spec: &TensorSpec,
    shape: &[usize],
) -> Result<(TensorData, &'a [u8]), RequestError> {
    let name = &spec.name;
    let count: usize = shape.iter().product();
    match (binary_size, data) {
        (Some(_), Some(_)) => Err(RequestError::Malformed(format!(
            "input {name:?} has both data and binary_data_size"
        ))),
        (None, None) => Err(RequestError::Malformed(format!(
            "input {name:?} has neither data nor binary_data_size"
        ))),
        (Some(size), None) => {
            if (section.len() as u64) < size {
                return Err(RequestError::Malformed(format!(
                    "input {name:?}: binary_data_size is {size} but only {} bytes follow the header",
                    section.len()
                )));
            }
            let (bytes, rest) = section.split_at(size as usize);
            Ok((from_binary(bytes, spec, count)?, rest))
        }
        (None, Some(json)) => {
            if json.len() != count {
                return Err(invalid(format!(
                    "input {name:?}: shape {shape:?} needs {count} values, data holds {}",
                    json.len()
                )));
            }
            let data = match spec.dtype {
                DataType::Bytes => TensorData::Bytes(
                    json.into_texts()
                        .map_err(|i| {
                            invalid(format!(
                                "input {name:?}: element {i} is not a string (BYTES)"
                            ))
                        })?
                        .into_iter()
                        .map(String::into_bytes)
                        .collect(),
                ),
                dtype => TensorData::Fixed(json.into_elements(dtype).map_err(|(i, why)| {
                    invalid(format!(
                        "input {name:?}: element {i} {why} (datatype {dtype})"
                    ))
                })?),
            };
            Ok((data, section))
        }
    }
}

fn from_binary(bytes: &[u8], spec: &TensorSpec, count: usize) -> Result<TensorData, RequestError> {
    let name = &spec.name;
    let Some(size) = spec.dtype.size() else {
        let texts = binary::decode_bytes(bytes, name)?;
        if texts.len() != count {
            return Err(invalid(format!(
                "input {name:?}: its shape needs {count} strings, its bytes hold {}",
                texts.len()
            )));
        }
        return Ok(TensorData::Bytes(
            texts.into_iter().map(String::into_bytes).collect(),
        ));
    };
    let expected = (count * size) as u64;
    if bytes.len() as u64 != expected {
        return Err(RequestError::Malformed(format!(
            "input {name:?}: binary_data_size is {} but its shape of {} takes {expected} bytes",
            bytes.len(),
            spec.dtype
        )));
    }
    if spec.dtype == DataType::Bool
        && let Some(i) = bytes.iter().position(|&b| b > 1)
    {
        return Err(invalid(format!(
            "input {name:?}: element {i} is {}, not a BOOL (0 or 1)",
            bytes[i]
        )));
    }
    Ok(TensorData::Fixed(Buffer::from_bytes(bytes)))
}
