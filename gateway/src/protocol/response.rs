//! Inference responses, in JSON or with Triton's binary extension.

use serde::Serialize;

use crate::infer::InferError;

use super::binary::encode_f32;

/// How one output goes back to the client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutputRequest {
    pub name: String,
    pub binary: bool,
}

#[derive(Serialize)]
struct Response<'a> {
    model_name: &'a str,
    model_version: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<&'a str>,
    outputs: Vec<Output<'a>>,
}

#[derive(Serialize)]
struct Output<'a> {
    name: &'a str,
    datatype: &'static str,
    shape: [usize; 2],
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<BinaryParameters>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a [f32]>,
}

#[derive(Serialize)]
struct BinaryParameters {
    binary_data_size: usize,
}

/// An encoded response: the body, and the JSON header's length when binary data follows it
/// (the value of the `Inference-Header-Content-Length` response header).
pub struct EncodedResponse {
    pub body: Vec<u8>,
    pub header_len: Option<usize>,
}

pub struct ResponseFields<'a> {
    pub model_name: &'a str,
    pub model_version: &'a str,
    pub id: Option<&'a str>,
    pub rows: usize,
    pub width: usize,
}

/// Encodes the model's one FP32 output for each requested output.
pub fn encode(
    fields: &ResponseFields<'_>,
    outputs: &[OutputRequest],
    values: &[f32],
) -> Result<EncodedResponse, InferError> {
    let any_binary = outputs.iter().any(|o| o.binary);
    // JSON has no infinity or NaN (serde_json would write `null`, which no client reads as
    // a number): such an output is a model failure in JSON, and travels as binary data.
    if let Some(o) = outputs.iter().find(|o| !o.binary)
        && let Some(i) = values.iter().position(|v| !v.is_finite())
    {
        return Err(InferError::Model(format!(
            "output {:?}: element {i} is {}, which JSON cannot carry; request it as binary \
             data (parameters.binary_data_output) to receive it",
            o.name, values[i]
        )));
    }
    let response = Response {
        model_name: fields.model_name,
        model_version: fields.model_version,
        id: fields.id,
        outputs: outputs
            .iter()
            .map(|o| Output {
                name: &o.name,
                datatype: "FP32",
                shape: [fields.rows, fields.width],
                parameters: o.binary.then_some(BinaryParameters {
                    binary_data_size: values.len() * 4,
                }),
                data: (!o.binary).then_some(values),
            })
            .collect(),
    };
    let mut body = Vec::with_capacity(64 + values.len() * if any_binary { 4 } else { 12 });
    serde_json::to_writer(&mut body, &response)
        .map_err(|e| InferError::Model(format!("cannot encode the response: {e}")))?;
    if !any_binary {
        return Ok(EncodedResponse {
            body,
            header_len: None,
        });
    }
    let header_len = body.len();
    for _ in outputs.iter().filter(|o| o.binary) {
        encode_f32(values, &mut body);
    }
    Ok(EncodedResponse {
        body,
        header_len: Some(header_len),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> ResponseFields<'static> {
        ResponseFields {
            model_name: "m",
            model_version: "3",
            id: Some("req-1"),
            rows: 1,
            width: 2,
        }
    }

    #[test]
    fn json_response() {
        let out = [OutputRequest {
            name: "output-0".into(),
            binary: false,
        }];
        let e = encode(&fields(), &out, &[0.5, -1.0]).unwrap();
        assert_eq!(e.header_len, None);
        let v: serde_json::Value = serde_json::from_slice(&e.body).unwrap();
        assert_eq!(v["id"], "req-1");
        assert_eq!(v["model_version"], "3");
        assert_eq!(v["outputs"][0]["shape"], serde_json::json!([1, 2]));
        assert_eq!(v["outputs"][0]["data"], serde_json::json!([0.5, -1.0]));
    }

    #[test]
    fn binary_response() {
        let out = [OutputRequest {
            name: "output-0".into(),
            binary: true,
        }];
        let e = encode(&fields(), &out, &[0.5, -1.0]).unwrap();
        let n = e.header_len.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&e.body[..n]).unwrap();
        assert_eq!(v["outputs"][0]["parameters"]["binary_data_size"], 8);
        assert!(v["outputs"][0].get("data").is_none());
        assert_eq!(&e.body[n..n + 4], &0.5f32.to_le_bytes());
        assert_eq!(e.body.len(), n + 8);
    }
}
