//! Named tensors with their values: fixed-size elements in an 8-byte-aligned buffer (so that
//! a backend reads them as `&[f32]`, `&[i64]`, ... without a copy), byte strings as a list.

use crate::DataType;

/// Little-endian element bytes, aligned for any element type.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Buffer {
    words: Vec<u64>,
    len: usize,
}

impl Buffer {
    pub fn zeroed(len: usize) -> Buffer {
        Buffer {
            words: vec![0; len.div_ceil(8)],
            len,
        }
    }

    pub fn from_bytes(bytes: &[u8]) -> Buffer {
        let mut b = Buffer::zeroed(bytes.len());
        b.as_bytes_mut().copy_from_slice(bytes);
        b
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn as_bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }

    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }

    /// The bytes as elements of `T`; `None` when their length is not a whole number of them.
    pub fn as_slice<T: bytemuck::Pod>(&self) -> Option<&[T]> {
        bytemuck::try_cast_slice(self.as_bytes()).ok()
    }

    /// Appends bytes, growing the buffer.
    pub fn extend_from_slice(&mut self, bytes: &[u8]) {
        let start = self.len;
        self.len += bytes.len();
        self.words.resize(self.len.div_ceil(8), 0);
        self.as_bytes_mut()[start..].copy_from_slice(bytes);
    }

    pub fn clear(&mut self) {
        self.words.clear();
        self.len = 0;
    }
}

impl std::fmt::Debug for Buffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Buffer({} bytes)", self.len)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TensorData {
    /// Every element's bytes, row-major.
    Fixed(Buffer),
    /// A BYTES tensor's elements, row-major.
    Bytes(Vec<Vec<u8>>),
}

/// A named, typed, row-major tensor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tensor {
    pub name: String,
    pub dtype: DataType,
    pub shape: Vec<usize>,
    pub data: TensorData,
}

impl Tensor {
    /// Elements its shape holds.
    pub fn elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// Whether its data holds exactly the elements its shape says.
    pub fn is_consistent(&self) -> bool {
        let elements = self.shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
        match (&self.data, elements) {
            (TensorData::Fixed(b), Some(n)) => {
                Some(b.len()) == n.checked_mul(self.dtype.size().unwrap_or(0))
            }
            (TensorData::Bytes(items), Some(n)) => items.len() == n,
            (_, None) => false,
        }
    }

    /// A tensor of zeros (empty strings for BYTES).
    pub fn zeros(name: &str, dtype: DataType, shape: Vec<usize>) -> Tensor {
        let n: usize = shape.iter().product();
        let data = match dtype.size() {
            Some(size) => TensorData::Fixed(Buffer::zeroed(n * size)),
            None => TensorData::Bytes(vec![Vec::new(); n]),
        };
        Tensor {
            name: name.to_string(),
            dtype,
            shape,
            data,
        }
    }

    /// Rows `start..end` of its first dimension, as a tensor of its own.
    pub fn rows(&self, start: usize, end: usize) -> Tensor {
        let per_row: usize = self.shape.iter().skip(1).product();
        let mut shape = self.shape.clone();
        shape[0] = end - start;
        let data = match &self.data {
            TensorData::Fixed(b) => {
                let size = self.dtype.size().unwrap_or(1);
                let bytes = &b.as_bytes()[start * per_row * size..end * per_row * size];
                TensorData::Fixed(Buffer::from_bytes(bytes))
            }
            TensorData::Bytes(v) => TensorData::Bytes(v[start * per_row..end * per_row].to_vec()),
        };
        Tensor {
            name: self.name.clone(),
            dtype: self.dtype,
            shape,
            data,
        }
    }

    /// Tensors of one name, type and non-batch shape, joined along their first dimension.
    pub fn concat(parts: &[&Tensor]) -> Tensor {
        let first = parts[0];
        let mut shape = first.shape.clone();
        shape[0] = parts.iter().map(|t| t.shape[0]).sum();
        let data = match &first.data {
            TensorData::Fixed(_) => {
                let mut buffer = Buffer::default();
                for p in parts {
                    if let TensorData::Fixed(b) = &p.data {
                        buffer.extend_from_slice(b.as_bytes());
                    }
                }
                TensorData::Fixed(buffer)
            }
            TensorData::Bytes(_) => TensorData::Bytes(
                parts
                    .iter()
                    .flat_map(|p| match &p.data {
                        TensorData::Bytes(v) => v.clone(),
                        TensorData::Fixed(_) => Vec::new(),
                    })
                    .collect(),
            ),
        };
        Tensor {
            name: first.name.clone(),
            dtype: first.dtype,
            shape,
            data,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_tensor(rows: usize, values: &[f32]) -> Tensor {
        Tensor {
            name: "x".into(),
            dtype: DataType::Fp32,
            shape: vec![rows, values.len() / rows],
            data: TensorData::Fixed(Buffer::from_bytes(bytemuck::cast_slice(values))),
        }
    }

    #[test]
    fn rows_and_concat_are_inverse() {
        let a = f32_tensor(2, &[1.0, 2.0, 3.0, 4.0]);
        let b = f32_tensor(1, &[5.0, 6.0]);
        let joined = Tensor::concat(&[&a, &b]);
        assert_eq!(joined.shape, vec![3, 2]);
        let TensorData::Fixed(buf) = &joined.data else {
            panic!("fixed")
        };
        assert_eq!(
            buf.as_slice::<f32>().unwrap(),
            &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
        );
        assert_eq!(joined.rows(0, 2), a);
        assert_eq!(joined.rows(2, 3), b);
    }

    #[test]
    fn buffers_are_aligned_for_eight_byte_elements() {
        let mut b = Buffer::default();
        b.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0, 0]);
        b.extend_from_slice(&[2, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(b.as_slice::<i64>().unwrap(), &[1, 2]);
        assert_eq!(Buffer::from_bytes(&[1, 2, 3]).as_slice::<u16>(), None);
    }
}
