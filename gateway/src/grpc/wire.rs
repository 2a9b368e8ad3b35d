//! `ModelInferRequest` and `ModelInferResponse` against the v2 request HTTP's validation
//! reads: each input's elements become its bytes in the binary extension's layout (raw
//! contents as they are, typed contents little-endian, BYTES elements each after a 4-byte
//! length), so one validation ([`crate::validate`]) serves JSON, binary and gRPC alike.
//! Outputs go back as raw contents, as Triton sends them.

use std::collections::HashMap;

use seam::DataType;

use super::pb;
use super::pb::infer_parameter::ParameterChoice;
use crate::error::ApiError;
use crate::infer::validated::Served;
use crate::lifecycle::registry::ModelVersion;
use crate::protocol::{
    InferRequest, InputTensor, RequestParameters, RequestedOutput, TensorParameters,
    tensor_response,
};

/// The request as v2's decoded JSON header and the binary section its inputs point into.
pub fn request_of(req: pb::ModelInferRequest) -> Result<(InferRequest, Vec<u8>), ApiError> {
    let pb::ModelInferRequest {
        id,
        parameters,
        inputs,
        outputs,
        raw_input_contents: raw,
        ..
    } = req;
    let mut binary = Vec::new();
    let sizes = if raw.is_empty() {
        typed_inputs(&inputs, &mut binary)?
    } else {
        raw_inputs(&inputs, raw, &mut binary)?
    };
    let inputs = (inputs.into_iter().zip(sizes))
        .map(|(input, size)| InputTensor {
            name: input.name,
            datatype: input.datatype,
            shape: input.shape,
            parameters: TensorParameters {
                binary_data_size: Some(size as u64),
                binary_data: None,
            },
            data: None,
        })
        .collect();
    let outputs = (!outputs.is_empty()).then(|| {
        (outputs.into_iter())
            .map(|o| RequestedOutput {
                name: o.name,
                parameters: TensorParameters::default(),
            })
            .collect()
    });
    let request = InferRequest {
        id: (!id.is_empty()).then_some(id),
        inputs,
        outputs,
        parameters: parameters_of(parameters)?,
    };
    Ok((request, binary))
}

/// Raw contents, one entry per input in order; their sizes.
fn raw_inputs(
    inputs: &[pb::model_infer_request::InferInputTensor],
    mut raw: Vec<Vec<u8>>,
    binary: &mut Vec<u8>,
) -> Result<Vec<usize>, ApiError> {
    if raw.len() != inputs.len() {
        return Err(ApiError::invalid(format!(
            "raw_input_contents has {} entries for {} inputs: give one per input, in order, or \
             none and each input's typed contents",
            raw.len(),
            inputs.len()
        )));
    }
    if let Some(i) = inputs.iter().find(|i| i.contents.is_some()) {
        return Err(ApiError::invalid(format!(
            "input {:?} has typed contents besides raw_input_contents: give one or the other",
            i.name
        )));
    }
    let sizes = raw.iter().map(Vec::len).collect();
    // One input, the usual request: its bytes are the section, not a copy.
    match raw.len() {
        1 => *binary = raw.pop().unwrap_or_default(),
        _ => raw.iter().for_each(|r| binary.extend_from_slice(r)),
    }
    Ok(sizes)
}

/// Each input's typed contents as bytes; their sizes.
fn typed_inputs(
    inputs: &[pb::model_infer_request::InferInputTensor],
    binary: &mut Vec<u8>,
) -> Result<Vec<usize>, ApiError> {
    inputs
        .iter()
        .map(|input| {
            let start = binary.len();
            let empty = pb::InferTensorContents::default();
            let contents = input.contents.as_ref().unwrap_or(&empty);
            write_typed(&input.name, &input.datatype, contents, binary)?;
            Ok(binary.len() - start)
        })
        .collect()
}

/// The contents field a datatype's elements travel in.
fn field_of(dtype: DataType) -> Option<&'static str> {
    Some(match dtype {
        DataType::Bool => "bool_contents",
        DataType::Int8 | DataType::Int16 | DataType::Int32 => "int_contents",
        DataType::Int64 => "int64_contents",
        DataType::Uint8 | DataType::Uint16 | DataType::Uint32 => "uint_contents",
        DataType::Uint64 => "uint64_contents",
        DataType::Fp32 => "fp32_contents",
        DataType::Fp64 => "fp64_contents",
        DataType::Bytes => "bytes_contents",
        DataType::Fp16 | DataType::Bf16 => return None,
    })
}

/// The contents fields that hold elements.
fn filled(c: &pb::InferTensorContents) -> Vec<&'static str> {
    let fields = [
        ("bool_contents", c.bool_contents.is_empty()),
        ("int_contents", c.int_contents.is_empty()),
        ("int64_contents", c.int64_contents.is_empty()),
        ("uint_contents", c.uint_contents.is_empty()),
        ("uint64_contents", c.uint64_contents.is_empty()),
        ("fp32_contents", c.fp32_contents.is_empty()),
        ("fp64_contents", c.fp64_contents.is_empty()),
        ("bytes_contents", c.bytes_contents.is_empty()),
    ];
    (fields.into_iter())
        .filter(|(_, empty)| !empty)
        .map(|(field, _)| field)
        .collect()
}

fn write_typed(
    name: &str,
    datatype: &str,
    c: &pb::InferTensorContents,
    out: &mut Vec<u8>,
) -> Result<(), ApiError> {
    let dtype = DataType::parse(datatype).ok_or_else(|| {
        ApiError::invalid(format!(
            "input {name:?}: datatype {datatype:?} is not one of the protocol's datatypes"
        ))
    })?;
    let field = field_of(dtype).ok_or_else(|| {
        ApiError::invalid(format!(
            "input {name:?}: {datatype} has no typed contents field; send it in \
             raw_input_contents"
        ))
    })?;
    if let Some(other) = filled(c).into_iter().find(|f| *f != field) {
        return Err(ApiError::invalid(format!(
            "input {name:?}: a {datatype} tensor's elements go in {field}, got {other}"
        )));
    }
    let narrow = |what: &str| {
        ApiError::invalid(format!(
            "input {name:?}: an element of {what} is out of {datatype}'s range"
        ))
    };
    match dtype {
        DataType::Bool => out.extend(c.bool_contents.iter().map(|&b| b as u8)),
        DataType::Int8 => for_each(&c.int_contents, out, |v| {
            i8::try_from(v).map(|x| x.to_le_bytes())
        })
        .map_err(|_| narrow("int_contents"))?,
        DataType::Int16 => for_each(&c.int_contents, out, |v| {
            i16::try_from(v).map(|x| x.to_le_bytes())
        })
        .map_err(|_| narrow("int_contents"))?,
        DataType::Int32 => c
            .int_contents
            .iter()
            .for_each(|v| out.extend(v.to_le_bytes())),
        DataType::Int64 => c
            .int64_contents
            .iter()
            .for_each(|v| out.extend(v.to_le_bytes())),
        DataType::Uint8 => for_each(&c.uint_contents, out, |v| {
            u8::try_from(v).map(|x| x.to_le_bytes())
        })
        .map_err(|_| narrow("uint_contents"))?,
        DataType::Uint16 => for_each(&c.uint_contents, out, |v| {
            u16::try_from(v).map(|x| x.to_le_bytes())
        })
        .map_err(|_| narrow("uint_contents"))?,
        DataType::Uint32 => c
            .uint_contents
            .iter()
            .for_each(|v| out.extend(v.to_le_bytes())),
        DataType::Uint64 => c
            .uint64_contents
            .iter()
            .for_each(|v| out.extend(v.to_le_bytes())),
        DataType::Fp32 => out.extend_from_slice(bytemuck::cast_slice(&c.fp32_contents)),
        DataType::Fp64 => c
            .fp64_contents
            .iter()
            .for_each(|v| out.extend(v.to_le_bytes())),
        DataType::Bytes => {
            for item in &c.bytes_contents {
                let len = u32::try_from(item.len()).map_err(|_| narrow("bytes_contents"))?;
                out.extend(len.to_le_bytes());
                out.extend_from_slice(item);
            }
        }
        DataType::Fp16 | DataType::Bf16 => unreachable!("no typed field: refused above"),
    }
    Ok(())
}

/// Narrows each element, little-endian; the first that does not fit fails.
fn for_each<T: Copy, const N: usize, E>(
    values: &[T],
    out: &mut Vec<u8>,
    narrow: impl Fn(T) -> Result<[u8; N], E>,
) -> Result<(), E> {
    for &v in values {
        out.extend(narrow(v)?);
    }
    Ok(())
}

/// The request parameters tandem acts on, each of the type it takes; others, a client's
/// own, are ignored as HTTP ignores them.
fn parameters_of(map: HashMap<String, pb::InferParameter>) -> Result<RequestParameters, ApiError> {
    let mut p = RequestParameters::default();
    for (key, value) in map {
        let Some(value) = value.parameter_choice else {
            continue;
        };
        let wrong = |wanted: &str| {
            ApiError::invalid(format!(
                "parameter {key:?} must be {wanted}, got {}",
                describe(&value)
            ))
        };
        match key.as_str() {
            "priority" => {
                p.priority = Some(unsigned(&value).ok_or_else(|| wrong("an unsigned integer"))?)
            }
            "timeout" => {
                p.timeout = Some(
                    unsigned(&value).ok_or_else(|| wrong("microseconds, an unsigned integer"))?,
                )
            }
            "truncate" => p.truncate = Some(boolean(&value).ok_or_else(|| wrong("a bool"))?),
            "normalize" => p.normalize = Some(boolean(&value).ok_or_else(|| wrong("a bool"))?),
            "cache" => p.cache = Some(boolean(&value).ok_or_else(|| wrong("a bool"))?),
            "prompt_name" => match &value {
                ParameterChoice::StringParam(s) => p.prompt_name = Some(s.clone()),
                _ => return Err(wrong("a string")),
            },
            _ => {}
        }
    }
    Ok(p)
}

fn unsigned(v: &ParameterChoice) -> Option<u64> {
    match *v {
        ParameterChoice::Uint64Param(n) => Some(n),
        ParameterChoice::Int64Param(n) => u64::try_from(n).ok(),
        _ => None,
    }
}

fn boolean(v: &ParameterChoice) -> Option<bool> {
    match *v {
        ParameterChoice::BoolParam(b) => Some(b),
        _ => None,
    }
}

fn describe(v: &ParameterChoice) -> String {
    match v {
        ParameterChoice::BoolParam(b) => format!("bool {b}"),
        ParameterChoice::Int64Param(n) => format!("int64 {n}"),
        ParameterChoice::Uint64Param(n) => format!("uint64 {n}"),
        ParameterChoice::DoubleParam(x) => format!("double {x}"),
        ParameterChoice::StringParam(s) => format!("string {s:?}"),
    }
}

/// The answer: each requested output with its raw contents.
pub fn response_of(
    version: &ModelVersion,
    served: &Served,
) -> Result<pb::ModelInferResponse, ApiError> {
    let completed = &served.ran.completed;
    let mut outputs = Vec::with_capacity(served.outputs.len());
    let mut raw = Vec::with_capacity(served.outputs.len());
    for requested in &served.outputs {
        let (datatype, shape, bytes) = match &version.info.input {
            models::InputKind::Tensors(_) => {
                let t = (completed.tensors.iter())
                    .find(|t| t.name == requested.name)
                    .ok_or_else(|| {
                        crate::infer::InferError::Model(format!(
                            "the model gave no output {:?}",
                            requested.name
                        ))
                    })?;
                let mut bytes = Vec::new();
                tensor_response::write_bytes(t, &mut bytes);
                let shape = t.shape.iter().map(|&d| d as i64).collect();
                (t.dtype.name(), shape, bytes)
            }
            _ => {
                let (rows, width) = (served.ran.rows, version.info.output_width);
                let bytes = bytemuck::cast_slice(&completed.output).to_vec();
                ("FP32", vec![rows as i64, width as i64], bytes)
            }
        };
        outputs.push(pb::model_infer_response::InferOutputTensor {
            name: requested.name.clone(),
            datatype: datatype.to_string(),
            shape,
            ..Default::default()
        });
        raw.push(bytes);
    }
    Ok(pb::ModelInferResponse {
        model_name: version.name.clone(),
        model_version: version.version.to_string(),
        id: served.id.clone().unwrap_or_default(),
        outputs,
        raw_output_contents: raw,
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use pb::model_infer_request::InferInputTensor;

    fn input(name: &str, datatype: &str, shape: &[i64]) -> InferInputTensor {
        InferInputTensor {
            name: name.into(),
            datatype: datatype.into(),
            shape: shape.to_vec(),
            ..Default::default()
        }
    }

    fn typed(mut i: InferInputTensor, c: pb::InferTensorContents) -> InferInputTensor {
        i.contents = Some(c);
        i
    }

    fn request(inputs: Vec<InferInputTensor>, raw: Vec<Vec<u8>>) -> pb::ModelInferRequest {
        pb::ModelInferRequest {
            inputs,
            raw_input_contents: raw,
            ..Default::default()
        }
    }

    #[test]
    fn typed_contents_become_the_binary_layout_narrowed_and_length_prefixed() {
        let ints = pb::InferTensorContents {
            int_contents: vec![-1, 2],
            ..Default::default()
        };
        let texts = pb::InferTensorContents {
            bytes_contents: vec![b"ab".to_vec(), vec![]],
            ..Default::default()
        };
        let inputs = vec![
            typed(input("a", "INT8", &[1, 2]), ints.clone()),
            typed(input("b", "INT32", &[1, 2]), ints),
            typed(input("t", "BYTES", &[2]), texts),
        ];
        let (v2, binary) = request_of(request(inputs, vec![])).unwrap();
        let sizes: Vec<_> = v2
            .inputs
            .iter()
            .map(|i| i.parameters.binary_data_size)
            .collect();
        assert_eq!(sizes, [Some(2), Some(8), Some(10)]);
        let mut want = vec![0xff, 2];
        want.extend((-1i32).to_le_bytes());
        want.extend(2i32.to_le_bytes());
        want.extend(2u32.to_le_bytes());
        want.extend(b"ab");
        want.extend(0u32.to_le_bytes());
        assert_eq!(binary, want);
    }

    #[test]
    fn out_of_range_wrong_field_and_fp16_typed_are_refused_naming_the_input() {
        let big = pb::InferTensorContents {
            int_contents: vec![300],
            ..Default::default()
        };
        let e = request_of(request(
            vec![typed(input("x", "INT8", &[1]), big.clone())],
            vec![],
        ));
        assert!(e.unwrap_err().to_string().contains("\"x\""));
        let e = request_of(request(
            vec![typed(input("y", "FP32", &[1]), big.clone())],
            vec![],
        ));
        let message = e.unwrap_err().to_string();
        assert!(
            message.contains("fp32_contents") && message.contains("int_contents"),
            "{message}"
        );
        let e = request_of(request(vec![typed(input("h", "FP16", &[1]), big)], vec![]));
        assert!(e.unwrap_err().to_string().contains("raw_input_contents"));
    }

    #[test]
    fn raw_contents_are_one_per_input_and_never_beside_typed_ones() {
        let two = vec![input("a", "FP32", &[1]), input("b", "FP32", &[1])];
        let (v2, binary) = request_of(request(two.clone(), vec![vec![1; 4], vec![2; 4]])).unwrap();
        assert_eq!(v2.inputs[1].parameters.binary_data_size, Some(4));
        assert_eq!(binary, [1, 1, 1, 1, 2, 2, 2, 2]);
        let e = request_of(request(two.clone(), vec![vec![1; 4]])).unwrap_err();
        assert!(e.to_string().contains("2 inputs"), "{e}");
        let mut mixed = two;
        mixed[0].contents = Some(pb::InferTensorContents::default());
        let e = request_of(request(mixed, vec![vec![1; 4], vec![2; 4]])).unwrap_err();
        assert!(e.to_string().contains("typed contents besides"), "{e}");
    }

    #[test]
    fn parameters_are_read_by_their_type() {
        use pb::infer_parameter::ParameterChoice::*;
        let p = |c| pb::InferParameter {
            parameter_choice: Some(c),
        };
        let mut map = HashMap::new();
        map.insert("priority".to_string(), p(Int64Param(2)));
        map.insert("timeout".to_string(), p(Uint64Param(500)));
        map.insert("custom".to_string(), p(StringParam("kept out".into())));
        let read = parameters_of(map.clone()).unwrap();
        assert_eq!((read.priority, read.timeout), (Some(2), Some(500)));
        map.insert("priority".to_string(), p(Int64Param(-1)));
        assert!(parameters_of(map.clone()).is_err());
        map.insert("priority".to_string(), p(BoolParam(true)));
        let e = parameters_of(map).unwrap_err();
        assert!(e.to_string().contains("bool true"), "{e}");
    }
}
