//! The protocol's tensor datatypes and how their values become the model's f32.
//!
//! A value converts when the f32 it becomes means the same number: integers up to 2^24 in
//! magnitude (or larger ones that f32 holds exactly), 16-bit floats always, f64 rounded to
//! the nearest f32 if it is within f32's range. Anything else is a 400 naming the input,
//! the datatype and the offending element.

use std::fmt;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Datatype {
    Bool,
    Int8,
    Int16,
    Int32,
    Int64,
    Uint8,
    Uint16,
    Uint32,
    Uint64,
    Fp16,
    Bf16,
    Fp32,
    Fp64,
}

impl Datatype {
    pub fn parse(name: &str) -> Option<Datatype> {
        Some(match name {
            "BOOL" => Datatype::Bool,
            "INT8" => Datatype::Int8,
            "INT16" => Datatype::Int16,
            "INT32" => Datatype::Int32,
            "INT64" => Datatype::Int64,
            "UINT8" => Datatype::Uint8,
            "UINT16" => Datatype::Uint16,
            "UINT32" => Datatype::Uint32,
            "UINT64" => Datatype::Uint64,
            "FP16" => Datatype::Fp16,
            "BF16" => Datatype::Bf16,
            "FP32" => Datatype::Fp32,
            "FP64" => Datatype::Fp64,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            Datatype::Bool => "BOOL",
            Datatype::Int8 => "INT8",
            Datatype::Int16 => "INT16",
            Datatype::Int32 => "INT32",
            Datatype::Int64 => "INT64",
            Datatype::Uint8 => "UINT8",
            Datatype::Uint16 => "UINT16",
            Datatype::Uint32 => "UINT32",
            Datatype::Uint64 => "UINT64",
            Datatype::Fp16 => "FP16",
            Datatype::Bf16 => "BF16",
            Datatype::Fp32 => "FP32",
            Datatype::Fp64 => "FP64",
        }
    }

    /// Bytes per element in the binary extension.
    pub fn size(self) -> usize {
        match self {
            Datatype::Bool | Datatype::Int8 | Datatype::Uint8 => 1,
            Datatype::Int16 | Datatype::Uint16 | Datatype::Fp16 | Datatype::Bf16 => 2,
            Datatype::Int32 | Datatype::Uint32 | Datatype::Fp32 => 4,
            Datatype::Int64 | Datatype::Uint64 | Datatype::Fp64 => 8,
        }
    }

    /// The integer range of an integer type: lowest value, and the first value above it
    /// (exclusive, so that the 64-bit bounds, 2^63 and 2^64, are exact in f64).
    fn int_range(self) -> Option<(f64, f64)> {
        const TWO_63: f64 = 9_223_372_036_854_775_808.0;
        Some(match self {
            Datatype::Int8 => (i8::MIN as f64, i8::MAX as f64 + 1.0),
            Datatype::Int16 => (i16::MIN as f64, i16::MAX as f64 + 1.0),
            Datatype::Int32 => (i32::MIN as f64, i32::MAX as f64 + 1.0),
            Datatype::Int64 => (-TWO_63, TWO_63),
            Datatype::Uint8 => (0.0, u8::MAX as f64 + 1.0),
            Datatype::Uint16 => (0.0, u16::MAX as f64 + 1.0),
            Datatype::Uint32 => (0.0, u32::MAX as f64 + 1.0),
            Datatype::Uint64 => (0.0, 2.0 * TWO_63),
            _ => return None,
        })
    }

    /// Writes `v` as one little-endian element of this type into `out` (its size), if
    /// the type holds it exactly (floats: within range; 16-bit floats rounded).
    pub fn write_exact(self, v: f64, out: &mut [u8]) -> Result<(), ValueError> {
        self.check_number(v)?;
        let finite = |f: f64| {
            if f.is_finite() {
                Ok(())
            } else {
                Err(ValueError::OutOfRange)
            }
        };
        match self {
            Datatype::Bool if v != 0.0 && v != 1.0 => return Err(ValueError::NotBool),
            Datatype::Bool | Datatype::Uint8 => out[0] = v as u8,
            Datatype::Int8 => out[0] = (v as i8) as u8,
            Datatype::Int16 => out.copy_from_slice(&(v as i16).to_le_bytes()),
            Datatype::Uint16 => out.copy_from_slice(&(v as u16).to_le_bytes()),
            Datatype::Int32 => out.copy_from_slice(&(v as i32).to_le_bytes()),
            Datatype::Uint32 => out.copy_from_slice(&(v as u32).to_le_bytes()),
            Datatype::Int64 => out.copy_from_slice(&(v as i64).to_le_bytes()),
            Datatype::Uint64 => out.copy_from_slice(&(v as u64).to_le_bytes()),
            Datatype::Fp16 => {
                let h = half::f16::from_f64(v);
                finite(h.to_f64())?;
                out.copy_from_slice(&h.to_le_bytes());
            }
            Datatype::Bf16 => {
                let h = half::bf16::from_f64(v);
                finite(h.to_f64())?;
                out.copy_from_slice(&h.to_le_bytes());
            }
            Datatype::Fp32 => {
                finite(v as f32 as f64)?;
                out.copy_from_slice(&(v as f32).to_le_bytes());
            }
            Datatype::Fp64 => out.copy_from_slice(&v.to_le_bytes()),
        }
        Ok(())
    }

    /// Whether `v` is a finite number and, for an integer type, a whole one in its range.
    fn check_number(self, v: f64) -> Result<(), ValueError> {
        if !v.is_finite() {
            return Err(ValueError::NonFinite);
        }
        if let Some((lo, hi)) = self.int_range() {
            if v.fract() != 0.0 {
                return Err(ValueError::NotInteger);
            }
            if v < lo || v >= hi {
                return Err(ValueError::OutOfRange);
            }
        }
        Ok(())
    }

    pub fn is_integer(self) -> bool {
        self.int_range().is_some()
    }

    /// Converts one value given as f64 (JSON numbers, or binary values widened exactly) into
    /// the f32 the model reads, or says why it cannot.
    pub fn to_model_f32(self, v: f64) -> Result<f32, ValueError> {
        self.check_number(v)?;
        if self.int_range().is_some() {
            let f = v as f32;
            if f as f64 != v {
                return Err(ValueError::Inexact);
            }
            return Ok(f);
        }
        match self {
            Datatype::Bool => {
                if v == 0.0 || v == 1.0 {
                    Ok(v as f32)
                } else {
                    Err(ValueError::NotBool)
                }
            }
            // The client declared a 16-bit type: the value is that type's number.
            Datatype::Fp16 => {
                let h = half::f16::from_f64(v);
                if h.is_infinite() {
                    Err(ValueError::OutOfRange)
                } else {
                    Ok(h.to_f32())
                }
            }
            Datatype::Bf16 => {
                let h = half::bf16::from_f64(v);
                if h.is_infinite() {
                    Err(ValueError::OutOfRange)
                } else {
                    Ok(h.to_f32())
                }
            }
            _ => {
                let f = v as f32;
                if f.is_finite() {
                    Ok(f)
                } else {
                    Err(ValueError::OutOfRange)
                }
            }
        }
    }
}

impl fmt::Display for Datatype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a value does not convert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueError {
    NonFinite,
    NotInteger,
    OutOfRange,
    Inexact,
    NotBool,
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ValueError::NonFinite => "is not a finite number",
            ValueError::NotInteger => "is not an integer",
            ValueError::OutOfRange => "is out of the datatype's range",
            ValueError::Inexact => "cannot be represented exactly as FP32",
            ValueError::NotBool => "is not 0 or 1",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for name in [
            "BOOL", "INT8", "INT16", "INT32", "INT64", "UINT8", "UINT16", "UINT32", "UINT64",
            "FP16", "BF16", "FP32", "FP64",
        ] {
            assert_eq!(Datatype::parse(name).unwrap().name(), name);
        }
        assert_eq!(Datatype::parse("fp32"), None);
        assert_eq!(Datatype::parse("BYTES"), None);
    }

    #[test]
    fn conversions_are_exact_or_refused() {
        assert_eq!(Datatype::Int8.to_model_f32(-128.0), Ok(-128.0));
        assert_eq!(
            Datatype::Int8.to_model_f32(128.0),
            Err(ValueError::OutOfRange)
        );
        assert_eq!(
            Datatype::Uint8.to_model_f32(-1.0),
            Err(ValueError::OutOfRange)
        );
        assert_eq!(
            Datatype::Int32.to_model_f32(1.5),
            Err(ValueError::NotInteger)
        );
        assert_eq!(
            Datatype::Int32.to_model_f32(16_777_217.0),
            Err(ValueError::Inexact)
        );
        assert_eq!(
            Datatype::Int64.to_model_f32(2f64.powi(40)),
            Ok(2f32.powi(40))
        );
        assert_eq!(Datatype::Bool.to_model_f32(2.0), Err(ValueError::NotBool));
        assert_eq!(
            Datatype::Fp32.to_model_f32(1e39),
            Err(ValueError::OutOfRange)
        );
        assert_eq!(
            Datatype::Fp32.to_model_f32(f64::NAN),
            Err(ValueError::NonFinite)
        );
        assert_eq!(Datatype::Fp64.to_model_f32(0.1), Ok(0.1f32));
        assert_eq!(
            Datatype::Fp16.to_model_f32(70000.0),
            Err(ValueError::OutOfRange)
        );
        assert_eq!(Datatype::Fp16.to_model_f32(0.5), Ok(0.5));
    }
}
