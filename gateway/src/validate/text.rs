//! Texts for a text model: a BYTES input of shape `[n]` or `[n, 1]` (as tritonclient sends
//! it), its elements JSON strings or, in the binary extension, each a 4-byte little-endian
//! length and that many bytes of UTF-8; for a classifier, optionally a second such input,
//! `text_pair`, each of its texts scored with the `text` of the same row. Tokenizing comes
//! after ([`crate::infer::tokenize`]).

use models::{TEXT_INPUT_NAME, TEXT_PAIR_INPUT_NAME, TextInput, Truncation};

use super::{ValidInput, invalid};
use crate::config::ModelSettings;
use crate::protocol::{InputTensor, RequestError, RequestParameters, binary};

/// Texts to embed, with what the request asked of them.
#[derive(Debug, Clone, PartialEq)]
pub struct TextRequest {
    pub texts: Vec<String>,
    /// For a classifier, the second text of each pair, as many as `texts`.
    pub pairs: Option<Vec<String>>,
    /// Cut over-long texts at the model's limit; otherwise refuse them.
    pub truncation: Truncation,
    /// L2-normalise the embeddings.
    pub normalize: bool,
    /// The prompt to put before each text, by name; `None`: the model's default.
    pub prompt_name: Option<String>,
}

/// The inputs as texts (and pairs), and the binary section left after them.
pub fn validate<'a>(
    inputs: Vec<InputTensor>,
    binary_section: &'a [u8],
    parameters: &RequestParameters,
    model: &TextInput,
    settings: &ModelSettings,
) -> Result<(ValidInput, &'a [u8]), RequestError> {
    let (mut texts, mut pairs, mut rest) = (None, None, binary_section);
    let names: Vec<String> = inputs.iter().map(|i| i.name.clone()).collect();
    for input in inputs {
        let slot = match input.name.as_str() {
            TEXT_INPUT_NAME => &mut texts,
            TEXT_PAIR_INPUT_NAME if model.is_classifier() => &mut pairs,
            _ => return Err(wrong_inputs(model, &names)),
        };
        if slot.is_some() {
            return Err(wrong_inputs(model, &names));
        }
        let (these, after) = texts_of(input, rest, settings)?;
        (*slot, rest) = (Some(these), after);
    }
    let texts = texts.ok_or_else(|| wrong_inputs(model, &names))?;
    if let Some(p) = &pairs
        && p.len() != texts.len()
    {
        return Err(invalid(format!(
            "input {TEXT_PAIR_INPUT_NAME:?} holds {} texts and {TEXT_INPUT_NAME:?} {}; a pair \
             is one of each",
            p.len(),
            texts.len()
        )));
    }
    if model.is_classifier() && parameters.normalize == Some(true) {
        return Err(invalid(
            "parameters.normalize: this model is a classifier; its logits are not normalised"
                .into(),
        ));
    }
    let request = TextRequest {
        texts,
        pairs,
        truncation: parameters.truncate.unwrap_or(true).into(),
        normalize: parameters.normalize.unwrap_or(model.normalize_by_default),
        prompt_name: parameters.prompt_name.clone(),
    };
    Ok((ValidInput::Text(request), rest))
}

fn wrong_inputs(model: &TextInput, names: &[String]) -> RequestError {
    let pair = match model.is_classifier() {
        true => format!(" (and, for pairs, {TEXT_PAIR_INPUT_NAME:?})"),
        false => String::new(),
    };
    invalid(format!(
        "inputs: expected exactly one input named {TEXT_INPUT_NAME:?}{pair}, got {names:?}"
    ))
}

/// One BYTES input's texts, and the binary section left after them.
fn texts_of<'a>(
    input: InputTensor,
    binary_section: &'a [u8],
    settings: &ModelSettings,
) -> Result<(Vec<String>, &'a [u8]), RequestError> {
    let name = input.name.as_str();
    if input.datatype != "BYTES" {
        return Err(invalid(format!(
            "input {name:?}: datatype {:?} is not supported; a text model takes BYTES",
            input.datatype
        )));
    }
    let count = text_count(name, &input.shape, settings)?;
    let (texts, rest) = match (input.parameters.binary_data_size, input.data) {
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
        (Some(size), None) => read_binary(name, size, binary_section)?,
        (None, Some(data)) => {
            let texts = data.into_texts().map_err(|i| {
                invalid(format!(
                    "input {name:?}: element {i} is not a string; BYTES data in JSON are strings"
                ))
            })?;
            (texts, binary_section)
        }
    };
    if texts.len() != count {
        return Err(invalid(format!(
            "input {name:?}: shape {:?} needs {count} texts, data holds {}",
            input.shape,
            texts.len()
        )));
    }
    if let Some(i) = texts.iter().position(String::is_empty) {
        return Err(invalid(format!("input {name:?}: text {i} is empty")));
    }
    Ok((texts, rest))
}

/// The number of texts a shape `[n]` or `[n, 1]` declares, at most `max_batch_size`.
fn text_count(name: &str, shape: &[i64], settings: &ModelSettings) -> Result<usize, RequestError> {
    let n = match shape {
        [n] | [n, 1] if *n >= 1 => *n as u64,
        other => {
            return Err(invalid(format!(
                "input {name:?}: shape {other:?} does not match the model's [-1] (or [-1, 1]) with at least one text"
            )));
        }
    };
    if n > settings.max_batch_size as u64 {
        return Err(invalid(format!(
            "input {name:?}: {n} texts exceed the model's max_batch_size of {}",
            settings.max_batch_size
        )));
    }
    Ok(n as usize)
}

/// `size` bytes of length-prefixed texts from the front of the binary section.
fn read_binary<'a>(
    name: &str,
    size: u64,
    section: &'a [u8],
) -> Result<(Vec<String>, &'a [u8]), RequestError> {
    if (section.len() as u64) < size {
        return Err(RequestError::Malformed(format!(
            "input {name:?}: binary_data_size is {size} but only {} bytes follow the header",
            section.len()
        )));
    }
    let (bytes, rest) = section.split_at(size as usize);
    Ok((binary::decode_bytes(bytes, name)?, rest))
}
