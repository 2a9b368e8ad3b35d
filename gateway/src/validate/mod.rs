//! Parse, don't validate: a decoded [`InferRequest`] plus its binary section becomes a
//! [`ValidRequest`] for one model version, or a 400 that names the field, the expected value
//! and the given one. Only valid requests reach the queue.
//!
//! What every request has is checked here (exactly one input, of the model's name; the
//! outputs asked for; priority and timeout); the input itself by its kind: rows of numbers
//! ([`dense`]) or texts ([`text`]).

mod dense;
mod tensors;
mod text;

use std::time::Duration;

use models::InputKind;

use crate::config::ModelSettings;
use crate::protocol::response::OutputRequest;
use crate::protocol::{
    InferRequest, InputTensor, RequestError, RequestParameters, RequestedOutput,
};

pub use text::TextRequest;

/// A request the model can run as is (a text model's, once tokenized).
#[derive(Debug)]
pub struct ValidRequest {
    pub id: Option<String>,
    pub input: ValidInput,
    pub outputs: Vec<OutputRequest>,
    pub priority: u32,
    pub timeout: Option<Duration>,
    /// `parameters.cache = false`: the response cache neither looked up nor written.
    pub cache: crate::cache::Policy,
}

#[derive(Debug)]
pub enum ValidInput {
    /// Row-major `[rows, input width]` in the model's f32.
    Dense {
        values: Vec<f32>,
        rows: usize,
    },
    Text(TextRequest),
    /// Named tensors; `rows` along their first dimension where the model batches, else 1.
    Tensors {
        tensors: Vec<seam::Tensor>,
        rows: usize,
    },
}

/// What validation needs of the model: its input and its output's name.
pub struct Signature<'a> {
    pub input: &'a InputKind,
    pub input_name: &'a str,
    pub output_name: &'a str,
}

fn invalid(msg: String) -> RequestError {
    RequestError::Invalid(msg)
}

pub fn validate(
    request: InferRequest,
    binary_section: &[u8],
    model: &Signature<'_>,
    settings: &ModelSettings,
) -> Result<ValidRequest, RequestError> {
    let InferRequest {
        id,
        inputs,
        outputs,
        parameters,
    } = request;
    let (input, rest) = match model.input {
        InputKind::Dense { width } => {
            let input = only_input(inputs, model.input_name)?;
            dense::validate(input, binary_section, *width, settings)?
        }
        InputKind::Text(t) => text::validate(inputs, binary_section, &parameters, t, settings)?,
        InputKind::Tensors(signature) => {
            tensors::validate(inputs, binary_section, signature, settings)?
        }
    };
    if !rest.is_empty() {
        return Err(RequestError::Malformed(format!(
            "{} bytes follow the header that no input claims (binary_data_size)",
            rest.len()
        )));
    }
    Ok(ValidRequest {
        id,
        input,
        outputs: match model.input {
            InputKind::Tensors(signature) => {
                let names: Vec<&str> = signature.outputs.iter().map(|o| o.name.as_str()).collect();
                requested_outputs(outputs, &parameters, &names)?
            }
            _ => requested_outputs(outputs, &parameters, &[model.output_name])?,
        },
        priority: priority(&parameters, settings)?,
        timeout: timeout(&parameters, settings),
        cache: match parameters.cache {
            Some(false) => crate::cache::Policy {
                lookup: false,
                store: false,
            },
            _ => crate::cache::Policy::USE,
        },
    })
}

fn only_input(inputs: Vec<InputTensor>, name: &str) -> Result<InputTensor, RequestError> {
    let wrong = |inputs: &[InputTensor]| {
        let names: Vec<&str> = inputs.iter().map(|i| i.name.as_str()).collect();
        invalid(format!(
            "inputs: expected exactly one input named {name:?}, got {names:?}"
        ))
    };
    match <[InputTensor; 1]>::try_from(inputs) {
        Ok([input]) if input.name == name => Ok(input),
        Ok(one) => Err(wrong(&one)),
        Err(inputs) => Err(wrong(&inputs)),
    }
}

/// The outputs a request asks for, among the model's `names` (all of them, in order, when
/// it names none).
fn requested_outputs(
    outputs: Option<Vec<RequestedOutput>>,
    parameters: &RequestParameters,
    names: &[&str],
) -> Result<Vec<OutputRequest>, RequestError> {
    let binary_default = parameters.binary_data_output.unwrap_or(false);
    let Some(list) = outputs else {
        return Ok(names
            .iter()
            .map(|name| OutputRequest {
                name: name.to_string(),
                binary: binary_default,
            })
            .collect());
    };
    let mut out: Vec<OutputRequest> = Vec::with_capacity(list.len());
    for o in list {
        if !names.contains(&o.name.as_str()) {
            let has = match names {
                [one] => format!("{one:?}"),
                all => format!("{all:?}"),
            };
            return Err(invalid(format!(
                "outputs: unknown output {:?}; the model has {has}",
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
    Ok(out)
}

fn priority(parameters: &RequestParameters, settings: &ModelSettings) -> Result<u32, RequestError> {
    match parameters.priority {
        None | Some(0) => Ok(settings.default_priority),
        Some(p) if p <= settings.priority_levels as u64 => Ok(p as u32),
        Some(p) => Err(invalid(format!(
            "parameters.priority: {p} is out of range; expected 1 (highest) to {}",
            settings.priority_levels
        ))),
    }
}

fn timeout(parameters: &RequestParameters, settings: &ModelSettings) -> Option<Duration> {
    let us = parameters.timeout.unwrap_or(settings.default_timeout_us);
    (us > 0).then(|| Duration::from_micros(us))
}
