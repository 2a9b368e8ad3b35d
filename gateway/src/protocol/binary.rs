//! Triton's binary tensor extension: a JSON header of `Inference-Header-Content-Length`
//! bytes, then the raw little-endian bytes of every input that declares
//! `binary_data_size`, in the order the inputs are listed.

use super::datatype::Datatype;
use crate::protocol::RequestError;

/// Splits a body into its JSON header and the binary section after it.
pub fn split(body: &[u8], header_len: usize) -> Result<(&[u8], &[u8]), RequestError> {
    if header_len > body.len() {
        return Err(RequestError::Malformed(format!(
            "Inference-Header-Content-Length is {header_len} but the body has only {} bytes",
            body.len()
        )));
    }
    Ok(body.split_at(header_len))
}

/// The 8 bytes of a chunk from `chunks_exact(8)`, as the array `from_le_bytes` takes.
fn le8(c: &[u8]) -> [u8; 8] {
    [c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]
}

/// Decodes one tensor's bytes into the model's f32, checking every value as the JSON path
/// does; `name` is for the error message.
pub fn decode(bytes: &[u8], datatype: Datatype, name: &str) -> Result<Vec<f32>, RequestError> {
    let size = datatype.size();
    debug_assert_eq!(bytes.len() % size, 0, "caller checks the length");
    let mut out = Vec::with_capacity(bytes.len() / size);
    let bad = |i: usize, why: String| {
        RequestError::Invalid(format!(
            "input {name:?}: element {i} {why} (datatype {datatype})"
        ))
    };
    // FP32, the common case, skips the general conversion: only finiteness can fail.
    if datatype == Datatype::Fp32 {
        for (i, c) in bytes.chunks_exact(4).enumerate() {
            let v = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            if !v.is_finite() {
                return Err(bad(i, "is not a finite number".into()));
            }
            out.push(v);
        }
        return Ok(out);
    }
    for (i, c) in bytes.chunks_exact(size).enumerate() {
        let v: f64 = match datatype {
            Datatype::Bool | Datatype::Uint8 => c[0] as f64,
            Datatype::Int8 => c[0] as i8 as f64,
            Datatype::Int16 => i16::from_le_bytes([c[0], c[1]]) as f64,
            Datatype::Uint16 => u16::from_le_bytes([c[0], c[1]]) as f64,
            Datatype::Int32 => i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
            Datatype::Uint32 => u32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64,
            Datatype::Int64 => {
                let v = i64::from_le_bytes(le8(c));
                // Beyond 2^53 the f64 would round; such a value is exact in f32 only if
                // f32 holds it (compared in i128: `as i64` saturates i64::MAX's 2^63 back).
                if v.unsigned_abs() > 1 << 53 && (v as f32) as i128 != v as i128 {
                    return Err(bad(i, "cannot be represented exactly as FP32".into()));
                }
                v as f64
            }
            Datatype::Uint64 => {
                let v = u64::from_le_bytes(le8(c));
                if v > 1 << 53 && (v as f32) as u128 != v as u128 {
                    return Err(bad(i, "cannot be represented exactly as FP32".into()));
                }
                v as f64
            }
            Datatype::Fp16 => half::f16::from_le_bytes([c[0], c[1]]).to_f64(),
            Datatype::Bf16 => half::bf16::from_le_bytes([c[0], c[1]]).to_f64(),
            Datatype::Fp64 => f64::from_le_bytes(le8(c)),
            Datatype::Fp32 => unreachable!("handled above"),
        };
        out.push(
            datatype
                .to_model_f32(v)
                .map_err(|e| bad(i, e.to_string()))?,
        );
    }
    Ok(out)
}

/// Decodes a BYTES tensor's bytes: elements one after the other, each a 4-byte
/// little-endian length and that many bytes, which must be UTF-8 text.
pub fn decode_bytes(mut bytes: &[u8], name: &str) -> Result<Vec<String>, RequestError> {
    let mut texts = Vec::new();
    while !bytes.is_empty() {
        let i = texts.len();
        let Some((len, rest)) = bytes.split_first_chunk::<4>() else {
            return Err(RequestError::Malformed(format!(
                "input {name:?}: element {i}: {} bytes left, too few for a 4-byte length",
                bytes.len()
            )));
        };
        let len = u32::from_le_bytes(*len) as usize;
        if len > rest.len() {
            return Err(RequestError::Malformed(format!(
                "input {name:?}: element {i} claims {len} bytes but only {} follow",
                rest.len()
            )));
        }
        let (text, rest) = rest.split_at(len);
        let text = std::str::from_utf8(text).map_err(|e| {
            RequestError::Invalid(format!(
                "input {name:?}: element {i} is not UTF-8 text ({e})"
            ))
        })?;
        texts.push(text.to_string());
        bytes = rest;
    }
    Ok(texts)
}

/// Appends f32 values as little-endian bytes.
pub fn encode_f32(values: &[f32], out: &mut Vec<u8>) {
    out.reserve(values.len() * 4);
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_datatype_decodes() {
        let f16: Vec<u8> = [0.5f32, -2.0]
            .iter()
            .flat_map(|v| half::f16::from_f32(*v).to_le_bytes())
            .collect();
        assert_eq!(decode(&f16, Datatype::Fp16, "x").unwrap(), vec![0.5, -2.0]);
        let bf16: Vec<u8> = [1.5f32]
            .iter()
            .flat_map(|v| half::bf16::from_f32(*v).to_le_bytes())
            .collect();
        assert_eq!(decode(&bf16, Datatype::Bf16, "x").unwrap(), vec![1.5]);
        assert_eq!(decode(&[0xff], Datatype::Int8, "x").unwrap(), vec![-1.0]);
        assert_eq!(
            decode(&[1, 0], Datatype::Bool, "x").unwrap(),
            vec![1.0, 0.0]
        );
        let i64s: Vec<u8> = [-7i64, 1 << 40]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        assert_eq!(
            decode(&i64s, Datatype::Int64, "x").unwrap(),
            vec![-7.0, (1u64 << 40) as f32]
        );
        let f64s: Vec<u8> = 0.25f64.to_le_bytes().to_vec();
        assert_eq!(decode(&f64s, Datatype::Fp64, "x").unwrap(), vec![0.25]);
    }

    #[test]
    fn bad_values_name_the_element() {
        let nan: Vec<u8> = [1.0f32, f32::NAN]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let err = decode(&nan, Datatype::Fp32, "input-0")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("element 1") && err.contains("input-0"),
            "{err}"
        );
        let err = decode(&[2], Datatype::Bool, "b").unwrap_err().to_string();
        assert!(err.contains("not 0 or 1"), "{err}");
        let big: Vec<u8> = ((1i64 << 60) + 1).to_le_bytes().to_vec();
        assert!(decode(&big, Datatype::Int64, "x").is_err());
    }

    #[test]
    fn header_length_beyond_the_body_is_malformed() {
        assert!(split(b"{}", 3).is_err());
        assert_eq!(split(b"{}abc", 2).unwrap(), (&b"{}"[..], &b"abc"[..]));
    }

    #[test]
    fn bytes_elements_are_length_prefixed_utf8() {
        let mut b = Vec::new();
        for t in ["hé", "", "x"] {
            b.extend_from_slice(&(t.len() as u32).to_le_bytes());
            b.extend_from_slice(t.as_bytes());
        }
        assert_eq!(decode_bytes(&b, "t").unwrap(), vec!["hé", "", "x"]);
        let past = [5u8, 0, 0, 0, b'a'];
        assert!(
            decode_bytes(&past, "t")
                .unwrap_err()
                .to_string()
                .contains("claims 5 bytes")
        );
        let cut = [1u8, 0];
        assert!(
            decode_bytes(&cut, "t")
                .unwrap_err()
                .to_string()
                .contains("4-byte length")
        );
        let latin1 = [1u8, 0, 0, 0, 0xe9];
        assert!(
            decode_bytes(&latin1, "t")
                .unwrap_err()
                .to_string()
                .contains("UTF-8")
        );
    }
}
