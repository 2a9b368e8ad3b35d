//! A tensor's JSON `data`, parsed in one pass straight into the f32 buffer the model reads.
//!
//! The datatype may come after `data` in the object, so the parser cannot convert by it;
//! instead it records, while it reads, the few facts every conversion rule needs (where the
//! first non-integer, boolean, inexact or overflowing value is, the extremes), and
//! [`JsonData::into_model_f32`] checks them against the datatype afterwards in O(1) —
//! except for 16-bit floats, which are rounded in place.

use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::datatype::{Datatype, ValueError};

#[derive(Debug, Default)]
pub struct JsonData {
    values: Vec<f32>,
    facts: Facts,
}

/// What the parser saw; indices are flat element positions.
#[derive(Debug, Default)]
struct Facts {
    first_bool: Option<usize>,
    first_number: Option<usize>,
    first_fraction: Option<usize>,
    /// An integer that f32 cannot hold exactly.
    first_inexact_integer: Option<usize>,
    /// A number beyond f32's range.
    first_overflow: Option<usize>,
    min: Option<(f64, usize)>,
    max: Option<(f64, usize)>,
}

impl JsonData {
    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    fn push_number(&mut self, v: f64) {
        let i = self.values.len();
        let f = &mut self.facts;
        f.first_number.get_or_insert(i);
        let integral = is_integral(v);
        if !integral {
            f.first_fraction.get_or_insert(i);
        }
        let as_f32 = v as f32;
        if !as_f32.is_finite() {
            f.first_overflow.get_or_insert(i);
        } else if integral && as_f32 as f64 != v {
            f.first_inexact_integer.get_or_insert(i);
        }
        if f.min.is_none_or(|(m, _)| v < m) {
            f.min = Some((v, i));
        }
        if f.max.is_none_or(|(m, _)| v > m) {
            f.max = Some((v, i));
        }
        self.values.push(as_f32);
    }

    fn push_bool(&mut self, b: bool) {
        let i = self.values.len();
        self.facts.first_bool.get_or_insert(i);
        self.values.push(if b { 1.0 } else { 0.0 });
    }

    /// The values as the model's f32, if every one converts from `datatype`; otherwise the
    /// flat index of the first that does not, and why.
    pub fn into_model_f32(self, datatype: Datatype) -> Result<Vec<f32>, (usize, String)> {
        let f = &self.facts;
        let fail = |i: usize, why: &str| Err((i, why.to_string()));
        if datatype == Datatype::Bool {
            if let Some(i) = f.first_number {
                return fail(i, "is a number; BOOL data must be true or false");
            }
            return Ok(self.values);
        }
        if let Some(i) = f.first_bool {
            return fail(i, &format!("is a boolean; {datatype} data must be numbers"));
        }
        // Out-of-range and non-integer checks use the extremes the parser kept.
        let check_extremes = |datatype: Datatype| -> Result<(), (usize, String)> {
            for (v, i) in [f.min, f.max].into_iter().flatten() {
                if let Err(e @ ValueError::OutOfRange) = datatype.to_model_f32(v) {
                    return Err((i, e.to_string()));
                }
            }
            Ok(())
        };
        match datatype {
            Datatype::Fp32 | Datatype::Fp64 => {
                if let Some(i) = f.first_overflow {
                    return fail(i, &ValueError::OutOfRange.to_string());
                }
                Ok(self.values)
            }
            Datatype::Fp16 | Datatype::Bf16 => {
                check_extremes(datatype)?;
                let mut values = self.values;
                for v in &mut values {
                    // In range (checked): rounding to the declared type cannot fail.
                    *v = datatype.to_model_f32(*v as f64).unwrap_or(*v);
                }
                Ok(values)
            }
            _ => {
                if let Some(i) = f.first_fraction {
                    return fail(i, &ValueError::NotInteger.to_string());
                }
                check_extremes(datatype)?;
                if let Some(i) = f.first_inexact_integer {
                    return fail(i, &ValueError::Inexact.to_string());
                }
                Ok(self.values)
            }
        }
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
        // i64 beyond 2^53 loses bits in f64: such an integer is never exact in f32 either,
        // and push_number flags it as inexact through the f64 it sees.
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

/// `v.fract() == 0.0` for a finite `v` without `fract`, which on the baseline x86-64 target
/// is a call into libm's `trunc` for every number of every request (2–3% of the server's
/// CPU in a profile); one truncating conversion does it. From 2^52 up every f64 is an
/// integer.
fn is_integral(v: f64) -> bool {
    const ALL_INTEGERS: f64 = 4_503_599_627_370_496.0; // 2^52
    if v.abs() < ALL_INTEGERS {
        (v as i64) as f64 == v
    } else {
        v.is_finite()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integral_agrees_with_fract() {
        for v in [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            -0.5,
            1e-300,
            123456789.0,
            4503599627370495.5,
            4503599627370496.0,
            9.007199254740993e15,
            1e300,
            -1e300,
            f64::MAX,
            f64::MIN,
            f64::MIN_POSITIVE,
            0.1,
            2.5e10,
        ] {
            assert_eq!(is_integral(v), v.fract() == 0.0, "{v}");
        }
    }

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
