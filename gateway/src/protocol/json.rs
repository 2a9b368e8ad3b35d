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
//!
//! That staging buffer is reused: each thread keeps the last one it finished with (up to
//! [`SCRATCH_MAX_VALUES`]), so a request's values land in memory the previous request
//! just warmed instead of a fresh, growing allocation. On a CPU the model's weights share
//! the last-level cache with everything the HTTP threads touch, and every line of fresh
//! memory a request writes is a line of weights the next batch reads from DRAM again.

use std::cell::Cell;

use serde::de::{self, DeserializeSeed, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};

use super::datatype::{Datatype, ValueError};

/// The largest staging buffer a thread keeps for the next request (512 KiB of f64): a
/// one-off giant body returns its memory instead of pinning it to the thread.
const SCRATCH_MAX_VALUES: usize = 64 * 1024;

thread_local! {
    static SCRATCH: Cell<Vec<f64>> = const { Cell::new(Vec::new()) };
}

#[derive(Debug)]
pub struct JsonData {
    /// Every leaf in row-major order; booleans as 1 and 0.
    values: Vec<f64>,
    first_bool: Option<usize>,
    first_number: Option<usize>,
    /// The first integer given in the text that f64 holds only rounded, and so f32 too
    /// (beyond 2^53), and the first number beyond every 64-bit integer (read as f64: it
    /// may round onto the range's bound). Integer datatypes refuse them; float datatypes
    /// take the rounded value, as they take any decimal.
    first_inexact_integer: Option<usize>,
    first_beyond_64_bits: Option<usize>,
    /// At most this many values are read: the declared shape's count, where it came
    /// before `data` ([`JsonData::limited`]).
    limit: Option<usize>,
    /// Strings (a BYTES tensor's elements), in order; and where the first one was among
    /// all the values, to name it if numbers were expected.
    texts: Vec<String>,
    first_text: Option<usize>,
}

impl Default for JsonData {
    /// Empty, on this thread's staging buffer if it has one.
    fn default() -> JsonData {
        let mut values = SCRATCH.take();
        values.clear();
        JsonData {
            values,
            first_bool: None,
            first_number: None,
            first_inexact_integer: None,
            first_beyond_64_bits: None,
            limit: None,
            texts: Vec::new(),
            first_text: None,
        }
    }
}

impl Drop for JsonData {
    /// Hands the staging buffer back to this thread for the next request (the larger one,
    /// if a request had two `data` arrays and the thread kept the other meanwhile).
    fn drop(&mut self) {
        let values = std::mem::take(&mut self.values);
        if values.capacity() > SCRATCH_MAX_VALUES {
            return;
        }
        let kept = SCRATCH.take();
        SCRATCH.set(if kept.capacity() >= values.capacity() {
            kept
        } else {
            values
        });
    }
}

impl JsonData {
    /// Values of any kind: numbers, booleans and strings.
    pub fn len(&self) -> usize {
        self.values.len() + self.texts.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn push_text(&mut self, text: String) {
        if self.first_text.is_none() {
            self.first_text = Some(self.len());
        }
        self.texts.push(text);
    }

    /// The strings of a BYTES tensor; otherwise the index of the first value that is not a
    /// string.
    pub fn into_texts(mut self) -> Result<Vec<String>, usize> {
        let first_other = [self.first_number, self.first_bool]
            .into_iter()
            .flatten()
            .min();
        match first_other {
            Some(i) => Err(i),
            None => Ok(std::mem::take(&mut self.texts)),
        }
    }

    fn mark(slot: &mut Option<usize>, at: usize) {
        if slot.is_none() {
            *slot = Some(at);
        }
    }

    // Inlined with `json_de::Reader::parse_number`: see there.
    #[inline(always)]
    fn push_number(&mut self, v: f64) {
        if self.first_number.is_none() {
            self.first_number = Some(self.len());
        }
        self.values.push(v);
    }

    fn push_bool(&mut self, b: bool) {
        if self.first_bool.is_none() {
            self.first_bool = Some(self.len());
        }
        self.values.push(if b { 1.0 } else { 0.0 });
    }

    /// The values as the model's f32, if every one converts from `datatype`; otherwise the
    /// flat index of the first that does not, and why.
    pub fn into_model_f32(self, datatype: Datatype) -> Result<Vec<f32>, (usize, String)> {
        let fail = |i: usize, why: &str| Err((i, why.to_string()));
        self.check_kinds(datatype)?;
        if datatype == Datatype::Bool {
            return Ok(self.values.iter().map(|&v| v as f32).collect());
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

impl JsonData {
    /// Whether every value is of the kind `datatype` takes (numbers, or booleans for BOOL)
    /// and, for an integer type, was given exactly; otherwise the first that is not, and why.
    fn check_kinds(&self, datatype: Datatype) -> Result<(), (usize, String)> {
        let fail = |i: usize, why: String| Err((i, why));
        if let Some(i) = self.first_text {
            return fail(
                i,
                format!("is a JSON string; {datatype} data must be numbers"),
            );
        }
        if datatype == Datatype::Bool {
            if let Some(i) = self.first_number {
                return fail(i, "is a number; BOOL data must be true or false".into());
            }
        } else if let Some(i) = self.first_bool {
            return fail(i, format!("is a boolean; {datatype} data must be numbers"));
        }
        if datatype.is_integer() {
            let beyond = self
                .first_beyond_64_bits
                .map(|i| (i, ValueError::OutOfRange));
            let inexact = self.first_inexact_integer.map(|i| (i, ValueError::Inexact));
            if let Some((i, why)) = beyond.into_iter().chain(inexact).min_by_key(|(i, _)| *i) {
                return fail(i, why.to_string());
            }
        }
        Ok(())
    }

    /// The values as little-endian elements of `dtype` (a fixed-size type), each exactly
    /// the number JSON gave (16-bit floats rounded to the nearest); otherwise the flat
    /// index of the first that is not one, and why.
    pub fn into_elements(self, dtype: seam::DataType) -> Result<seam::Buffer, (usize, String)> {
        let datatype =
            Datatype::parse(dtype.name()).ok_or((0, format!("{dtype} is not numeric")))?;
        let size = dtype.size().unwrap_or(0);
        self.check_kinds(datatype)?;
        let mut out = seam::Buffer::zeroed(self.values.len() * size);
        let bytes = out.as_bytes_mut();
        for (i, (&v, slot)) in self
            .values
            .iter()
            .zip(bytes.chunks_exact_mut(size))
            .enumerate()
        {
            datatype
                .write_exact(v, slot)
                .map_err(|e| (i, e.to_string()))?;
        }
        Ok(out)
    }
}

impl<'de> Deserialize<'de> for JsonData {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        JsonData::limited(deserializer, None)
    }
}

impl JsonData {
    /// Reads the values, refusing the array at the first value past `limit`.
    pub fn limited<'de, D: Deserializer<'de>>(
        deserializer: D,
        limit: Option<usize>,
    ) -> Result<JsonData, D::Error> {
        let mut data = JsonData::default();
        data.limit = limit;
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

// The number visits are inlined into the reader's number arm, like the parser itself
// (`json_de::Reader::parse_number`): a value then goes from its digits to the staging buffer
// without a call (`cargo bench -p gateway --bench json -- decode_varied`).
impl<'de> Visitor<'de> for Flatten<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("numbers, booleans or strings, in arrays nested as deep as the shape")
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<(), E> {
        self.0.push_bool(v);
        Ok(())
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<(), E> {
        self.0.push_text(v.to_string());
        Ok(())
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<(), E> {
        self.0.push_text(v);
        Ok(())
    }

    #[inline(always)]
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<(), E> {
        // Beyond 2^53 an i64 loses bits in f64; what the model reads is an f32, exact only
        // where f32 holds the value (compared in i128, where nothing saturates).
        if v.unsigned_abs() > 1 << 53 && (v as f32) as i128 != v as i128 {
            let at = self.0.values.len();
            JsonData::mark(&mut self.0.first_inexact_integer, at);
        }
        self.0.push_number(v as f64);
        Ok(())
    }

    #[inline(always)]
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<(), E> {
        if v > 1 << 53 && (v as f32) as u128 != v as u128 {
            let at = self.0.values.len();
            JsonData::mark(&mut self.0.first_inexact_integer, at);
        }
        self.0.push_number(v as f64);
        Ok(())
    }

    #[inline(always)]
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<(), E> {
        // The reader gives integers that fit 64 bits as i64 or u64; an f64 this large
        // was written past them (and may have rounded onto the bound).
        if v <= -9_223_372_036_854_775_808.0 || v >= 18_446_744_073_709_551_616.0 {
            let at = self.0.values.len();
            JsonData::mark(&mut self.0.first_beyond_64_bits, at);
        }
        self.0.push_number(v);
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let data = self.0;
        while seq.next_element_seed(Flatten(&mut *data))?.is_some() {
            if data.limit.is_some_and(|limit| data.len() > limit) {
                return Err(de::Error::custom(format_args!(
                    "data holds more than the {} values its shape declares",
                    data.limit.unwrap_or_default()
                )));
            }
        }
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
    fn strings_are_texts_and_objects_are_refused() {
        let mixed = parse(r#"[1, "2"]"#);
        assert_eq!(mixed.into_model_f32(Datatype::Fp32).unwrap_err().0, 1);
        assert_eq!(parse(r#"[1, "2"]"#).into_texts().unwrap_err(), 0);
        // Positions count every element, strings included.
        assert_eq!(parse(r#"["a", "b", 3]"#).into_texts().unwrap_err(), 2);
        assert_eq!(parse(r#"["a", true, 3]"#).into_texts().unwrap_err(), 1);
        assert_eq!(
            parse(r#"[["a"], ["b\u00e9"]]"#).into_texts().unwrap(),
            vec!["a".to_string(), "bé".to_string()]
        );
        assert!(serde_json::from_str::<JsonData>(r#"[{"a": 1}]"#).is_err());
        assert!(serde_json::from_str::<JsonData>("[1, null]").is_err());
    }

    #[test]
    fn the_staging_buffer_is_reused_unless_it_grew_too_large() {
        // Tests share threads with nothing else here: each runs on its own thread.
        let first = parse("[1, 2, 3, 4, 5, 6, 7, 8, 9]");
        let capacity = first.values.capacity();
        drop(first);
        let second = parse("[1]");
        assert_eq!(second.values.capacity(), capacity, "not the same buffer");
        assert_eq!(second.into_model_f32(Datatype::Fp32).unwrap(), vec![1.0]);

        let mut huge = JsonData::default();
        huge.values = vec![0.0; SCRATCH_MAX_VALUES + 1];
        drop(huge);
        assert!(JsonData::default().values.capacity() <= SCRATCH_MAX_VALUES);
    }
}
