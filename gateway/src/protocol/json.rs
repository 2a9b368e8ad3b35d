//! A tensor's JSON `data`, read in one pass as it is parsed and converted to the f32 the
//! model reads once the datatype is known.
//!
//! The datatype may come after `data` in the object, so the parser cannot convert by it
//! while it reads. It keeps each value as the f64 JSON gave (a 16-bit or integer datatype
//! is checked against that, not against an f32 that may have rounded it), and
//! [`JsonData::into_model_f32`] converts them in one tight loop afterwards: per value
//! this costs less than the bookkeeping that converting as it read used to (a fifth of
//! the decode; `cargo bench -p gateway --bench json`). The price is memory: a value takes
//! at least two bytes of JSON (`1,`) and eight here, so a body's values need at most four
//! times its size, which `limits.max_body_bytes` bounds.

use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::datatype::{Datatype, ValueError};

#[derive(Debug, Default)]
pub struct JsonData {
    /// Every leaf in row-major order; booleans as 1 and 0.
    values: Vec<f64>,
    first_bool: Option<usize>,
    first_number: Option<usize>,
}

impl JsonData {
    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    fn push_number(&mut self, v: f64) {
        if self.first_number.is_none() {
            self.first_number = Some(self.values.len());
        }
        self.values.push(v);
    }

    fn push_bool(&mut self, b: bool) {
        if self.first_bool.is_none() {
            self.first_bool = Some(self.values.len());
        }
        self.values.push(if b { 1.0 } else { 0.0 });
    }

    /// The values as the model's f32, if every one converts from `datatype`; otherwise the
    /// flat index of the first that does not, and why.
    pub fn into_model_f32(self, datatype: Datatype) -> Result<Vec<f32>, (usize, String)> {
        let fail = |i: usize, why: &str| Err((i, why.to_string()));
        if datatype == Datatype::Bool {
            if let Some(i) = self.first_number {
                return fail(i, "is a number; BOOL data must be true or false");
            }
            return Ok(self.values.iter().map(|&v| v as f32).collect());
        }
        if let Some(i) = self.first_bool {
            return fail(i, &format!("is a boolean; {datatype} data must be numbers"));
        }
        if matches!(datatype, Datatype::Fp32 | Datatype::Fp64) {
            // The common case, without a branch per value: convert all, then look for the
            // one that overflowed f32.
            let out: Vec<f32> = self.values.iter().map(|&v| v as f32).collect();
            return match out.iter().position(|v| !v.is_finite()) {
                Some(i) => fail(i, &ValueError::OutOfRange.to_string()),
                None => Ok(out),
            };
        }
        self.values
            .iter()
            .enumerate()
            .map(|(i, &v)| datatype.to_model_f32(v).map_err(|e| (i, e.to_string())))
            .collect()
    }
}

impl<'de> Deserialize<'de> for JsonData {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let mut data = JsonData::default();
        deserializer.deserialize_any(Flatten(&mut data))?;
        Ok(data)
    }
}

/// Visits nested arrays depth-first, appending every leaf in row-major order.
struct Flatten<'a>(&'a mut JsonData);

impl<'de> DeserializeSeed<'de> for Flatten<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Flatten<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("numbers or booleans, in arrays nested as deep as the shape")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.0.push_bool(v);
        Ok(())
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        self.0.push_number(v as f64);
        // Beyond 2^53 an i64 loses bits in f64, and integer datatypes are checked against
        // that rounded value; the model reads an f32, which holds even fewer.
        Ok(())
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        self.0.push_number(v as f64);
        Ok(())
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        self.0.push_number(v);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let data = self.0;
        while seq.next_element_seed(Flatten(&mut *data))?.is_some() {}
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> JsonData {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn nested_and_flat_give_the_same_values() {
        let nested = parse("[[1, 2.5], [3, 4]]")
            .into_model_f32(Datatype::Fp32)
            .unwrap();
        let flat = parse("[1, 2.5, 3, 4]")
            .into_model_f32(Datatype::Fp32)
            .unwrap();
        assert_eq!(nested, vec![1.0, 2.5, 3.0, 4.0]);
        assert_eq!(nested, flat);
    }

    #[test]
    fn datatypes_are_enforced_with_the_offending_index() {
        assert_eq!(
            parse("[1, 2.5]")
                .into_model_f32(Datatype::Int32)
                .unwrap_err()
                .0,
            1
        );
        assert_eq!(
            parse("[1, 300]")
                .into_model_f32(Datatype::Int8)
                .unwrap_err()
                .0,
            1
        );
        assert_eq!(
            parse("[-1, 3]")
                .into_model_f32(Datatype::Uint8)
                .unwrap_err()
                .0,
            0
        );
        assert_eq!(
            parse("[1, true]")
                .into_model_f32(Datatype::Fp32)
                .unwrap_err()
                .0,
            1
        );
        assert_eq!(
            parse("[true, 1]")
                .into_model_f32(Datatype::Bool)
                .unwrap_err()
                .0,
            1
        );
        assert_eq!(
            parse("[0, 1e39]")
                .into_model_f32(Datatype::Fp32)
                .unwrap_err()
                .0,
            1
        );
        assert_eq!(
            parse("[16777217]")
                .into_model_f32(Datatype::Int32)
                .unwrap_err()
                .0,
            0
        );
        assert_eq!(
            parse("[70000]")
                .into_model_f32(Datatype::Fp16)
                .unwrap_err()
                .0,
            0
        );
        assert_eq!(
            parse("[true, false]")
                .into_model_f32(Datatype::Bool)
                .unwrap(),
            vec![1.0, 0.0]
        );
        assert_eq!(
            parse("[255]").into_model_f32(Datatype::Uint8).unwrap(),
            vec![255.0]
        );
        assert_eq!(
            parse("[0.1]").into_model_f32(Datatype::Fp16).unwrap(),
            vec![half::f16::from_f64(0.1).to_f32()]
        );
    }

    #[test]
    fn strings_and_objects_are_refused() {
        assert!(serde_json::from_str::<JsonData>(r#"[1, "2"]"#).is_err());
        assert!(serde_json::from_str::<JsonData>(r#"[{"a": 1}]"#).is_err());
        assert!(serde_json::from_str::<JsonData>("[1, null]").is_err());
    }
}
