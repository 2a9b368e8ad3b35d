//! What a model takes and gives: named, typed tensors with their shapes.

use crate::DataType;

/// A named input or output. `dims` leave out the batch dimension where the model batches;
/// `-1` marks a dimension of any size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorSpec {
    pub name: String,
    pub dtype: DataType,
    pub dims: Vec<i64>,
    /// An input a request may leave out.
    pub optional: bool,
}

impl TensorSpec {
    /// Whether a shape (without the batch dimension) fits `dims`.
    pub fn accepts(&self, shape: &[usize]) -> bool {
        shape.len() == self.dims.len()
            && shape
                .iter()
                .zip(&self.dims)
                .all(|(&s, &d)| d < 0 || s as i64 == d)
    }

    /// The protocol's shape: `-1` first for the batch dimension where there is one.
    pub fn protocol_shape(&self, batched: bool) -> Vec<i64> {
        batched
            .then_some(-1)
            .into_iter()
            .chain(self.dims.iter().copied())
            .collect()
    }
}

/// A model's inputs and outputs, and whether their first dimension is a batch of rows the
/// model runs together (Triton's `max_batch_size > 0`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    pub inputs: Vec<TensorSpec>,
    pub outputs: Vec<TensorSpec>,
    pub batched: bool,
}

impl Signature {
    pub fn input(&self, name: &str) -> Option<&TensorSpec> {
        self.inputs.iter().find(|t| t.name == name)
    }

    pub fn output(&self, name: &str) -> Option<&TensorSpec> {
        self.outputs.iter().find(|t| t.name == name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variable_dims_accept_any_size_and_fixed_ones_only_theirs() {
        let spec = TensorSpec {
            name: "x".into(),
            dtype: DataType::Fp32,
            dims: vec![3, -1],
            optional: false,
        };
        assert!(spec.accepts(&[3, 7]));
        assert!(spec.accepts(&[3, 0]));
        assert!(!spec.accepts(&[4, 7]));
        assert!(!spec.accepts(&[3]));
        assert_eq!(spec.protocol_shape(true), vec![-1, 3, -1]);
        assert_eq!(spec.protocol_shape(false), vec![3, -1]);
    }
}
