//! Rows of numbers: any numeric datatype, converted to the model's f32 where the value is
//! exact, shape `[rows, width]` with the model's width, in JSON or in the binary extension.

use super::{ValidInput, invalid};
use crate::config::ModelSettings;
use crate::protocol::{Datatype, InputTensor, JsonData, RequestError, binary};

const DATATYPES: &str =
    "BOOL, INT8, INT16, INT32, INT64, UINT8, UINT16, UINT32, UINT64, FP16, BF16, FP32, FP64";

/// The input as rows, and the binary section left after it.
pub fn validate<'a>(
    input: InputTensor,
    binary_section: &'a [u8],
    width: usize,
    settings: &ModelSettings,
) -> Result<(ValidInput, &'a [u8]), RequestError> {
    let name = input.name.as_str();
    let datatype = Datatype::parse(&input.datatype).ok_or_else(|| {
        invalid(format!(
            "input {name:?}: datatype {:?} is not supported; expected one of {DATATYPES}",
            input.datatype
        ))
    })?;
    let rows = rows(name, &input.shape, width, settings)?;
    let tensor = Tensor {
        name,
        datatype,
        rows,
        width,
    };
    let (values, rest) = match (input.parameters.binary_data_size, input.data) {
        (Some(_), Some(_)) => {
            return Err(RequestError::Malformed(format!(
                "input {name:?} has both data and binary_data_size"
            )));
        }
        (None, None) => {
            return Err(RequestError::Malformed(format!(
                "input {name:?} has neither data nor binary_data_size"
            )));
        }
        (Some(size), None) => tensor.read_binary(size, binary_section)?,
        (None, Some(data)) => (tensor.read_json(data)?, binary_section),
    };
    if let Some(i) = values.iter().position(|v| !v.is_finite()) {
        return Err(invalid(format!(
            "input {name:?}: element {i} is not a finite number"
        )));
    }
    Ok((ValidInput::Dense { values, rows }, rest))
}

/// The rows of a `[rows, width]` shape, at most `max_batch_size`.
fn rows(
    name: &str,
    shape: &[i64],
    width: usize,
    settings: &ModelSettings,
) -> Result<usize, RequestError> {
    let expected_shape = format!("[rows, {width}]");
    let (rows, given) = match shape {
        [r, w] if *r >= 1 && *w >= 0 => (*r as u64, *w as u64),
        other => {
            return Err(invalid(format!(
                "input {name:?}: shape {other:?} does not match the model's {expected_shape} with rows >= 1"
            )));
        }
    };
    if given != width as u64 {
        return Err(invalid(format!(
            "input {name:?}: shape [{rows}, {given}] does not match the model's {expected_shape}: expected {width} values per row, got {given}"
        )));
    }
    if rows > settings.max_batch_size as u64 {
        return Err(invalid(format!(
            "input {name:?}: {rows} rows exceed the model's max_batch_size of {}",
            settings.max_batch_size
        )));
    }
    Ok(rows as usize)
}

/// A validated shape of a named input.
struct Tensor<'a> {
    name: &'a str,
    datatype: Datatype,
    rows: usize,
    width: usize,
}

impl Tensor<'_> {
    fn count(&self) -> usize {
        self.rows * self.width
    }

    /// Its `size` bytes from the front of the binary section; the rest of the section.
    fn read_binary<'b>(
        &self,
        size: u64,
        section: &'b [u8],
    ) -> Result<(Vec<f32>, &'b [u8]), RequestError> {
        let (name, datatype) = (self.name, self.datatype);
        let expected = (self.count() * datatype.size()) as u64;
        if size != expected {
            return Err(RequestError::Malformed(format!(
                "input {name:?}: binary_data_size is {size} but shape [{}, {}] of {datatype} takes {expected} bytes",
                self.rows, self.width
            )));
        }
        if (section.len() as u64) < size {
            return Err(RequestError::Malformed(format!(
                "input {name:?}: binary_data_size is {size} but only {} bytes follow the header",
                section.len()
            )));
        }
        let (bytes, rest) = section.split_at(size as usize);
        Ok((binary::decode(bytes, datatype, name)?, rest))
    }

    fn read_json(&self, data: JsonData) -> Result<Vec<f32>, RequestError> {
        let (name, datatype, count) = (self.name, self.datatype, self.count());
        if data.len() != count {
            return Err(invalid(format!(
                "input {name:?}: shape [{}, {}] needs {count} values, data holds {}",
                self.rows,
                self.width,
                data.len()
            )));
        }
        data.into_model_f32(datatype).map_err(|(i, why)| {
            invalid(format!(
                "input {name:?}: element {i} {why} (datatype {datatype})"
            ))
        })
    }
}
