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
        let Some(spec) = signature.input(&input.name) else {
            return Err(invalid(format!("inputs: unknown input {:?}", input.name)));
        };
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
    // Every element's bytes must be countable: a shape of 2^62 values with no data is
    // refused here, not wrapped around in a size check later.
    let size = spec.dtype.size().unwrap_or(1);
    shape
        .iter()
        .try_fold(size, |n, &d| n.checked_mul(d))
        .filter(|&bytes| bytes <= isize::MAX as usize)
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

#[cfg(test)]
mod tests {
    use seam::{DataType, Signature, TensorData, TensorSpec};

    use crate::config::ModelSettings;
    use crate::protocol::{InferRequest, json_de};
    use crate::validate::{ValidInput, ValidRequest, validate};

    fn spec(name: &str, dtype: DataType, dims: &[i64]) -> TensorSpec {
        TensorSpec {
            name: name.into(),
            dtype,
            dims: dims.to_vec(),
            optional: false,
        }
    }

    fn signature(batched: bool) -> Signature {
        Signature {
            inputs: vec![
                spec("x", DataType::Fp32, &[2]),
                spec("ids", DataType::Int64, &[-1]),
                TensorSpec {
                    optional: true,
                    ..spec("mask", DataType::Bool, &[2])
                },
            ],
            outputs: vec![spec("y", DataType::Fp32, &[2])],
            batched,
        }
    }

    fn run(body: serde_json::Value, binary: &[u8], batched: bool) -> Result<ValidRequest, String> {
        let text = body.to_string();
        let request: InferRequest = json_de::from_slice(text.as_bytes()).unwrap();
        let input = models::InputKind::Tensors(signature(batched));
        let model = crate::validate::Signature {
            input: &input,
            input_name: "",
            output_name: "",
        };
        let settings = ModelSettings {
            max_batch_size: 4,
            ..ModelSettings::default()
        };
        validate(request, binary, &model, &settings).map_err(|e| e.to_string())
    }

    fn tensors(v: ValidRequest) -> (Vec<seam::Tensor>, usize) {
        match v.input {
            ValidInput::Tensors { tensors, rows } => (tensors, rows),
            other => panic!("not tensors: {other:?}"),
        }
    }

    #[test]
    fn json_and_binary_inputs_become_exact_typed_tensors() {
        let ids: Vec<u8> = [7i64, -(1 << 60)]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let body = serde_json::json!({"inputs": [
            {"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [0.5, -2]},
            {"name": "ids", "datatype": "INT64", "shape": [1, 2], "parameters": {"binary_data_size": 16}},
            {"name": "mask", "datatype": "BOOL", "shape": [1, 2], "data": [true, false]}
        ]});
        let valid = run(body, &ids, true).unwrap();
        assert_eq!(valid.outputs.len(), 1, "every output by default");
        let (t, rows) = tensors(valid);
        assert_eq!(rows, 1);
        let fixed = |i: usize| match &t[i].data {
            TensorData::Fixed(b) => b.clone(),
            TensorData::Bytes(_) => panic!("fixed"),
        };
        assert_eq!(fixed(0).as_slice::<f32>().unwrap(), &[0.5, -2.0]);
        assert_eq!(fixed(1).as_slice::<i64>().unwrap(), &[7, -(1 << 60)]);
        assert_eq!(fixed(2).as_bytes(), &[1, 0]);
        assert_eq!(t[1].shape, vec![1, 2]);
    }

    #[test]
    fn bad_inputs_are_refused_naming_the_tensor_and_what_was_expected() {
        let x = |shape: serde_json::Value, data: serde_json::Value| serde_json::json!({"name": "x", "datatype": "FP32", "shape": shape, "data": data});
        let ids =
            serde_json::json!({"name": "ids", "datatype": "INT64", "shape": [1, 1], "data": [1]});
        let cases = [
            (vec![x([1, 2].into(), [1, 2].into())], "\"ids\" is missing"),
            (
                vec![x([1, 3].into(), [1, 2, 3].into()), ids.clone()],
                "does not match the model's [-1, 2]",
            ),
            (
                vec![
                    x([5, 2].into(), serde_json::json!(vec![0; 10])),
                    serde_json::json!({"name": "ids", "datatype": "INT64", "shape": [5, 1], "data": [1, 1, 1, 1, 1]}),
                ],
                "max_batch_size of 4",
            ),
            (
                vec![x([2, 2].into(), [1, 2, 3, 4].into()), ids.clone()],
                "same number of rows",
            ),
            (
                vec![
                    x([1, 2].into(), [1, 2].into()),
                    ids.clone(),
                    serde_json::json!({"name": "z", "datatype": "FP32", "shape": [1], "data": [1]}),
                ],
                "unknown input \"z\"",
            ),
            (
                vec![
                    serde_json::json!({"name": "x", "datatype": "FP64", "shape": [1, 2], "data": [1, 2]}),
                    ids.clone(),
                ],
                "datatype \"FP64\" does not match the model's FP32",
            ),
            (
                vec![
                    x([1, 2].into(), [1, 2].into()),
                    serde_json::json!({"name": "ids", "datatype": "INT64", "shape": [1, 1], "data": [1.5]}),
                ],
                "element 0 is not an integer",
            ),
            (
                vec![
                    x([1, 2].into(), [1, 2].into()),
                    ids.clone(),
                    serde_json::json!({"name": "mask", "datatype": "BOOL", "shape": [1, 2], "data": [1, 0]}),
                ],
                "BOOL data must be true or false",
            ),
            (
                vec![x([1, 2].into(), [1, 2].into()), ids.clone(), ids.clone()],
                "given twice",
            ),
        ];
        for (inputs, says) in cases {
            let err = run(serde_json::json!({ "inputs": inputs }), &[], true).unwrap_err();
            assert!(err.contains(says), "{err:?} lacks {says:?}");
        }
        let binary_bool = serde_json::json!({"inputs": [
            x([1, 2].into(), [1, 2].into()), ids.clone(),
            {"name": "mask", "datatype": "BOOL", "shape": [1, 2], "parameters": {"binary_data_size": 2}}
        ]});
        let err = run(binary_bool, &[1, 2], true).unwrap_err();
        assert!(err.contains("not a BOOL"), "{err}");
        let unknown_output = serde_json::json!({"inputs": [x([1, 2].into(), [1, 2].into()), ids], "outputs": [{"name": "q"}]});
        let err = run(unknown_output, &[], true).unwrap_err();
        assert!(err.contains("unknown output \"q\""), "{err}");
    }

    #[test]
    fn a_model_without_a_batch_dimension_takes_its_shapes_as_they_are() {
        let body = serde_json::json!({"inputs": [
            {"name": "x", "datatype": "FP32", "shape": [2], "data": [1, 2]},
            {"name": "ids", "datatype": "INT64", "shape": [3], "data": [1, 2, 3]}
        ]});
        let (t, rows) = tensors(run(body, &[], false).unwrap());
        assert_eq!((rows, t[1].shape.clone()), (1, vec![3]));
        let batched_shape = serde_json::json!({"inputs": [
            {"name": "x", "datatype": "FP32", "shape": [1, 2], "data": [1, 2]},
            {"name": "ids", "datatype": "INT64", "shape": [3], "data": [1, 2, 3]}
        ]});
        assert!(
            run(batched_shape, &[], false)
                .unwrap_err()
                .contains("shape [1, 2]")
        );
    }
}
