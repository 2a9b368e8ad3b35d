//! `InputTensor`'s deserializer: serde's derived one, but for `data` read through
//! [`JsonData::limited`] once `shape` is known, so an overlong array is refused at the first
//! value past the declared count instead of being read whole (a 16 MB body of values
//! against a shape of 64 would otherwise stage every one of them).

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::{InputTensor, JsonData, TensorParameters};

const FIELDS: &[&str] = &["name", "datatype", "shape", "parameters", "data"];

impl<'de> Deserialize<'de> for InputTensor {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_struct("InputTensor", FIELDS, TensorVisitor)
    }
}

struct TensorVisitor;

/// Reads `data` holding at most `limit` values.
struct LimitedData(Option<usize>);

impl<'de> DeserializeSeed<'de> for LimitedData {
    type Value = JsonData;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<JsonData, D::Error> {
        JsonData::limited(deserializer, self.0)
    }
}

/// The values a shape declares; `None` where it declares none that can be trusted (a
/// negative dimension, an overflow): validation refuses such shapes with its own message.
fn declared_count(shape: &[i64]) -> Option<usize> {
    shape.iter().try_fold(1usize, |n, &d| {
        usize::try_from(d).ok().and_then(|d| n.checked_mul(d))
    })
}

impl<'de> Visitor<'de> for TensorVisitor {
    type Value = InputTensor;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an input tensor object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<InputTensor, A::Error> {
        let mut name = None;
        let mut datatype = None;
        let mut shape: Option<Vec<i64>> = None;
        let mut parameters = None;
        let mut data = None;
        while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            match key.as_ref() {
                "name" => set(&mut name, map.next_value()?, "name")?,
                "datatype" => set(&mut datatype, map.next_value()?, "datatype")?,
                "shape" => set(&mut shape, map.next_value()?, "shape")?,
                "parameters" => set(&mut parameters, map.next_value()?, "parameters")?,
                "data" => {
                    let limit = shape.as_deref().and_then(declared_count);
                    let value: Option<JsonData> = map.next_value_seed(OptionalData(limit))?;
                    set(&mut data, value, "data")?
                }
                other => return Err(de::Error::unknown_field(other, FIELDS)),
            }
        }
        Ok(InputTensor {
            name: name.ok_or_else(|| de::Error::missing_field("name"))?,
            datatype: datatype.ok_or_else(|| de::Error::missing_field("datatype"))?,
            shape: shape.ok_or_else(|| de::Error::missing_field("shape"))?,
            parameters: parameters.unwrap_or_else(TensorParameters::default),
            data: data.flatten(),
        })
    }
}

fn set<T, E: de::Error>(slot: &mut Option<T>, value: T, field: &'static str) -> Result<(), E> {
    if slot.is_some() {
        return Err(de::Error::duplicate_field(field));
    }
    *slot = Some(value);
    Ok(())
}

/// `data` as `null` or an array.
struct OptionalData(Option<usize>);

impl<'de> DeserializeSeed<'de> for OptionalData {
    type Value = Option<JsonData>;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Option<JsonData>, D::Error> {
        d.deserialize_option(OptionalVisitor(self.0))
    }
}

struct OptionalVisitor(Option<usize>);

impl<'de> Visitor<'de> for OptionalVisitor {
    type Value = Option<JsonData>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("null or an array of values")
    }

    fn visit_none<E: de::Error>(self) -> Result<Option<JsonData>, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<JsonData>, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<JsonData>, D::Error> {
        LimitedData(self.0).deserialize(d).map(Some)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<InputTensor, String> {
        crate::protocol::json_de::from_slice(json.as_bytes()).map_err(|e| e.to_string())
    }

    #[test]
    fn data_after_shape_stops_at_the_declared_count() {
        let many: Vec<String> = (0..1000).map(|i| i.to_string()).collect();
        let body = format!(
            r#"{{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [{}]}}"#,
            many.join(",")
        );
        let e = parse(&body).unwrap_err();
        assert!(e.contains("more than the 4 values"), "{e}");
        let ok = parse(
            r#"{"name": "x", "datatype": "FP32", "shape": [2, 2], "data": [[1, 2], [3, 4]]}"#,
        )
        .unwrap();
        assert_eq!(ok.data.unwrap().len(), 4);
        // Before the shape, nothing limits it: validation compares the counts.
        let first =
            parse(r#"{"data": [1, 2, 3], "name": "x", "datatype": "FP32", "shape": [1, 2]}"#)
                .unwrap();
        assert_eq!(first.data.unwrap().len(), 3);
    }

    #[test]
    fn fields_are_checked_as_the_derived_deserializer_checks_them() {
        for (body, words) in [
            (r#"{"name": "x", "datatype": "FP32"}"#, "shape"),
            (
                r#"{"name": "x", "datatype": "FP32", "shape": [1], "extra": 1}"#,
                "extra",
            ),
            (
                r#"{"name": "x", "name": "y", "datatype": "FP32", "shape": [1]}"#,
                "duplicate",
            ),
            (r#"["x", "FP32", [1], {}, [1]]"#, "object"),
        ] {
            let e = parse(body).unwrap_err();
            assert!(e.contains(words), "{body}: {e}");
        }
        let t = parse(r#"{"name": "x", "datatype": "FP32", "shape": [1], "data": null}"#).unwrap();
        assert!(t.data.is_none());
    }
}
