//! Parse, don't validate: a decoded [`InferRequest`] plus its binary section becomes a
//! [`ValidRequest`] for one model version, or a 400 that names the field, the expected value
//! and the given one. Only valid requests reach the queue.

use std::time::Duration;

use models::{INPUT_NAME, OUTPUT_NAME};

use crate::config::ModelSettings;
use crate::protocol::RequestError;
use crate::protocol::response::OutputRequest;
use crate::protocol::{Datatype, InferRequest, InputTensor, binary};

/// A request the model can run as is.
#[derive(Debug)]
pub struct ValidRequest {
    pub id: Option<String>,
    pub rows: usize,
    /// Row-major `[rows, input width]` in the model's f32.
    pub input: Vec<f32>,
    pub outputs: Vec<OutputRequest>,
    pub priority: u32,
    pub timeout: Option<Duration>,
}

const DATATYPES: &str =
    "BOOL, INT8, INT16, INT32, INT64, UINT8, UINT16, UINT32, UINT64, FP16, BF16, FP32, FP64";

fn invalid(msg: String) -> RequestError {
    RequestError::Invalid(msg)
}

fn wrong_inputs(inputs: &[InputTensor]) -> RequestError {
    let names: Vec<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
    invalid(format!(
        "inputs: expected exactly one input named {INPUT_NAME:?}, got {names:?}"
    ))
}

pub fn validate(
    request: InferRequest,
    mut binary_section: &[u8],
    input_width: usize,
    settings: &ModelSettings,
) -> Result<ValidRequest, RequestError> {
    let InferRequest {
        id,
        inputs,
        outputs,
        parameters,
    } = request;
    let input = match <[InputTensor; 1]>::try_from(inputs) {
        Ok([input]) if input.name == INPUT_NAME => input,
        Ok(one) => return Err(wrong_inputs(&one)),
        Err(inputs) => return Err(wrong_inputs(&inputs)),
    };
    let name = input.name.as_str();
    let datatype = Datatype::parse(&input.datatype).ok_or_else(|| {
        invalid(format!(
            "input {name:?}: datatype {:?} is not supported; expected one of {DATATYPES}",
            input.datatype
        ))
    })?;
    let expected_shape = format!("[rows, {input_width}]");
    let (rows, width) = match input.shape.as_slice() {
        [r, w] if *r >= 1 && *w >= 0 => (*r as u64, *w as u64),
        other => {
            return Err(invalid(format!(
                "input {name:?}: shape {other:?} does not match the model's {expected_shape} with rows >= 1"
            )));
        }
    };
    if width != input_width as u64 {
        return Err(invalid(format!(
            "input {name:?}: shape [{rows}, {width}] does not match the model's {expected_shape}: expected {input_width} values per row, got {width}"
        )));
    }
    if rows > settings.max_batch_size as u64 {
        return Err(invalid(format!(
            "input {name:?}: {rows} rows exceed the model's max_batch_size of {}",
            settings.max_batch_size
        )));
    }
    let rows = rows as usize;
    let count = rows * input_width;

    let values = match (input.parameters.binary_data_size, input.data) {
        (Some(_), Some(_)) => {
            return Err(RequestError::Malformed(format!(
                "input {name:?} has both data and binary_data_size"
            )));
        }
        (None, None) => {
            return Err(RequestError::Malformed(format!(
                "input {name:?} has neither data nor binary_data_size"
            )));
        }
        (Some(size), None) => {
            let expected = (count * datatype.size()) as u64;
            if size != expected {
                return Err(RequestError::Malformed(format!(
                    "input {name:?}: binary_data_size is {size} but shape [{rows}, {width}] of {datatype} takes {expected} bytes"
                )));
            }
            if (binary_section.len() as u64) < size {
                return Err(RequestError::Malformed(format!(
                    "input {name:?}: binary_data_size is {size} but only {} bytes follow the header",
                    binary_section.len()
                )));
            }
            let (bytes, rest) = binary_section.split_at(size as usize);
            binary_section = rest;
            binary::decode(bytes, datatype, name)?
        }
        (None, Some(data)) => {
            if data.len() != count {
                return Err(invalid(format!(
                    "input {name:?}: shape [{rows}, {width}] needs {count} values, data holds {}",
                    data.len()
                )));
            }
            data.into_model_f32(datatype).map_err(|(i, why)| {
                invalid(format!(
                    "input {name:?}: element {i} {why} (datatype {datatype})"
                ))
            })?
        }
    };
    if !binary_section.is_empty() {
        return Err(RequestError::Malformed(format!(
            "{} bytes follow the header that no input claims (binary_data_size)",
            binary_section.len()
        )));
    }
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return Err(invalid(format!(
            "input {name:?}: element {i} is not a finite number"
        )));
    }

    let binary_default = parameters.binary_data_output.unwrap_or(false);
    let outputs = match outputs {
        None => vec![OutputRequest {
            name: OUTPUT_NAME.to_string(),
            binary: binary_default,
        }],
        Some(list) => {
            let mut out: Vec<OutputRequest> = Vec::with_capacity(list.len());
            for o in list {
                if o.name != OUTPUT_NAME {
                    return Err(invalid(format!(
                        "outputs: unknown output {:?}; the model has {OUTPUT_NAME:?}",
                        o.name
                    )));
                }
                if out.iter().any(|x| x.name == o.name) {
                    return Err(invalid(format!("outputs: {:?} is requested twice", o.name)));
                }
                out.push(OutputRequest {
                    name: o.name,
                    binary: o.parameters.binary_data.unwrap_or(binary_default),
                });
            }
            out
        }
    };

    let priority = match parameters.priority {
        None | Some(0) => settings.default_priority,
        Some(p) if p <= settings.priority_levels as u64 => p as u32,
        Some(p) => {
            return Err(invalid(format!(
                "parameters.priority: {p} is out of range; expected 1 (highest) to {}",
                settings.priority_levels
            )));
        }
    };
    let timeout_us = parameters.timeout.unwrap_or(settings.default_timeout_us);
    let timeout = (timeout_us > 0).then(|| Duration::from_micros(timeout_us));

    Ok(ValidRequest {
        id,
        rows,
        input: values,
        outputs,
        priority,
        timeout,
    })
}
