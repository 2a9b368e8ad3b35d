//! A tensor model's response: each requested output of its own datatype and shape, as JSON
//! values or as bytes after the JSON header (Triton's binary extension; BYTES elements each
//! after a 4-byte little-endian length).

use seam::{DataType, Tensor, TensorData};
use serde_json::{Value, json};

use super::response::{EncodedResponse, OutputRequest};
use crate::infer::InferError;

/// The model's identity in a response.
pub struct Identity<'a> {
    pub model_name: &'a str,
    pub model_version: &'a str,
    pub id: Option<&'a str>,
}

pub fn encode(
    who: &Identity<'_>,
    requested: &[OutputRequest],
    tensors: &[Tensor],
) -> Result<EncodedResponse, InferError> {
    let mut outputs = Vec::with_capacity(requested.len());
    let mut binary = Vec::new();
    for o in requested {
        let t = tensors
            .iter()
            .find(|t| t.name == o.name)
            .ok_or_else(|| InferError::Model(format!("the model gave no output {:?}", o.name)))?;
        let mut out = json!({ "name": t.name, "datatype": t.dtype.name(), "shape": t.shape });
        if o.binary {
            let start = binary.len();
            write_bytes(t, &mut binary);
            out["parameters"] = json!({ "binary_data_size": binary.len() - start });
        } else {
            out["data"] = json_values(t)?;
        }
        outputs.push(out);
    }
    let mut response = json!({
        "model_name": who.model_name,
        "model_version": who.model_version,
        "outputs": outputs,
    });
    if let Some(id) = who.id {
        response["id"] = json!(id);
    }
    let mut body = serde_json::to_vec(&response)
        .map_err(|e| InferError::Model(format!("cannot encode the response: {e}")))?;
    if requested.iter().all(|o| !o.binary) {
        return Ok(EncodedResponse {
            body,
            header_len: None,
        });
    }
    let header_len = body.len();
    body.extend_from_slice(&binary);
    Ok(EncodedResponse {
        body,
        header_len: Some(header_len),
    })
}

/// A tensor's elements as the binary extension (and gRPC's raw contents) carry them.
pub fn write_bytes(t: &Tensor, out: &mut Vec<u8>) {
    match &t.data {
        TensorData::Fixed(b) => out.extend_from_slice(b.as_bytes()),
        TensorData::Bytes(items) => {
            for item in items {
                out.extend_from_slice(&(item.len() as u32).to_le_bytes());
                out.extend_from_slice(item);
            }
        }
    }
}

/// The elements of `T` as JSON numbers, exactly (every integer type up to 64 bits, f32 as
/// the shortest decimal that reads back as the same f32).
fn exact<T: bytemuck::Pod + serde::Serialize>(b: &seam::Buffer) -> Value {
    json!(b.as_slice::<T>().unwrap_or(&[]))
}

/// The elements of a float type as f64s, to check before they become JSON.
fn widened<T: bytemuck::Pod>(b: &seam::Buffer, f: impl Fn(T) -> f64) -> Vec<f64> {
    b.as_slice::<T>()
        .map_or_else(Vec::new, |v| v.iter().map(|&x| f(x)).collect())
}

/// A BYTES tensor's elements as JSON strings, where they are UTF-8.
fn texts(name: &str, items: &[Vec<u8>]) -> Result<Value, InferError> {
    let texts = items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            std::str::from_utf8(item).map_err(|_| {
                InferError::Model(format!(
                    "output {name:?}: element {i} is not UTF-8, which JSON cannot carry; \
                     request it as binary data"
                ))
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(json!(texts))
}

/// The values as JSON: numbers (integers exactly), booleans, or strings for BYTES.
fn json_values(t: &Tensor) -> Result<Value, InferError> {
    let name = &t.name;
    let b = match &t.data {
        TensorData::Bytes(items) => return texts(name, items),
        TensorData::Fixed(b) => b,
    };
    Ok(match t.dtype {
        DataType::Bool => json!(b.as_bytes().iter().map(|&x| x != 0).collect::<Vec<_>>()),
        DataType::Uint8 => exact::<u8>(b),
        DataType::Int8 => exact::<i8>(b),
        DataType::Uint16 => exact::<u16>(b),
        DataType::Int16 => exact::<i16>(b),
        DataType::Uint32 => exact::<u32>(b),
        DataType::Int32 => exact::<i32>(b),
        DataType::Uint64 => exact::<u64>(b),
        DataType::Int64 => exact::<i64>(b),
        DataType::Fp16 => finite(name, widened(b, |x: half::f16| x.to_f64()))?,
        DataType::Bf16 => finite(name, widened(b, |x: half::bf16| x.to_f64()))?,
        DataType::Fp32 => {
            finite(name, widened(b, |x: f32| x.into()))?;
            exact::<f32>(b)
        }
        DataType::Fp64 => finite(name, widened(b, |x: f64| x))?,
        DataType::Bytes => {
            return Err(InferError::Model(format!(
                "output {name:?}: BYTES without strings"
            )));
        }
    })
}

/// Floats as JSON numbers; JSON has no infinity or NaN, so such an output travels only as
/// binary data.
fn finite(name: &str, values: Vec<f64>) -> Result<Value, InferError> {
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return Err(InferError::Model(format!(
            "output {name:?}: element {i} is {}, which JSON cannot carry; request it as binary \
             data (parameters.binary_data_output) to receive it",
            values[i]
        )));
    }
    Ok(Value::Array(values.into_iter().map(|v| json!(v)).collect()))
}

#[cfg(test)]
mod tests {
    use seam::{Buffer, DataType, Tensor, TensorData};

    use super::*;

    fn fixed(name: &str, dtype: DataType, shape: Vec<usize>, bytes: &[u8]) -> Tensor {
        Tensor {
            name: name.into(),
            dtype,
            shape,
            data: TensorData::Fixed(Buffer::from_bytes(bytes)),
        }
    }

    fn outputs() -> Vec<Tensor> {
        let ids: Vec<u8> = [i64::MAX, -3]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let halves: Vec<u8> = [half::f16::from_f32(0.5), half::f16::from_f32(-2.0)]
            .iter()
            .flat_map(|h| h.to_le_bytes())
            .collect();
        vec![
            fixed("ids", DataType::Int64, vec![1, 2], &ids),
            fixed("mask", DataType::Bool, vec![1, 2], &[1, 0]),
            fixed("h", DataType::Fp16, vec![2], &halves),
            Tensor {
                name: "words".into(),
                dtype: DataType::Bytes,
                shape: vec![2],
                data: TensorData::Bytes(vec![b"a".to_vec(), b"bc".to_vec()]),
            },
        ]
    }

    fn ask(names: &[(&str, bool)]) -> Vec<OutputRequest> {
        names
            .iter()
            .map(|(n, b)| OutputRequest {
                name: n.to_string(),
                binary: *b,
            })
            .collect()
    }

    const WHO: Identity<'static> = Identity {
        model_name: "m",
        model_version: "2",
        id: None,
    };

    #[test]
    fn json_carries_every_type_exactly() {
        let e = encode(
            &WHO,
            &ask(&[
                ("ids", false),
                ("mask", false),
                ("h", false),
                ("words", false),
            ]),
            &outputs(),
        )
        .unwrap();
        assert_eq!(e.header_len, None);
        let v: serde_json::Value = serde_json::from_slice(&e.body).unwrap();
        assert_eq!(v["outputs"][0]["data"], serde_json::json!([i64::MAX, -3]));
        assert_eq!(v["outputs"][0]["datatype"], "INT64");
        assert_eq!(v["outputs"][1]["data"], serde_json::json!([true, false]));
        assert_eq!(v["outputs"][2]["data"], serde_json::json!([0.5, -2.0]));
        assert_eq!(v["outputs"][3]["data"], serde_json::json!(["a", "bc"]));
        assert_eq!(v["outputs"][3]["shape"], serde_json::json!([2]));
    }

    #[test]
    fn binary_outputs_follow_the_header_in_the_order_asked() {
        let e = encode(
            &WHO,
            &ask(&[("words", true), ("mask", true), ("ids", false)]),
            &outputs(),
        )
        .unwrap();
        let n = e.header_len.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&e.body[..n]).unwrap();
        assert_eq!(
            v["outputs"][0]["parameters"]["binary_data_size"],
            4 + 1 + 4 + 2
        );
        assert_eq!(v["outputs"][1]["parameters"]["binary_data_size"], 2);
        assert_eq!(
            &e.body[n..],
            &[1, 0, 0, 0, b'a', 2, 0, 0, 0, b'b', b'c', 1, 0]
        );
        let missing = encode(&WHO, &ask(&[("nope", false)]), &outputs());
        assert!(missing.is_err());
    }

    #[test]
    fn non_finite_floats_travel_only_as_binary() {
        let nan = fixed("f", DataType::Fp32, vec![1], &f32::NAN.to_le_bytes());
        let Err(err) = encode(&WHO, &ask(&[("f", false)]), std::slice::from_ref(&nan)) else {
            panic!("NaN encoded as JSON");
        };
        assert!(err.to_string().contains("binary"), "{err}");
        assert!(encode(&WHO, &ask(&[("f", true)]), &[nan]).is_ok());
    }
}
