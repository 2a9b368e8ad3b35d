//! Embeddings cut to fewer values, for a text encoder trained so that the first values of
//! its embeddings are an embedding of their own (Matryoshka representation learning):
//! OpenAI's and TEI's `dimensions`, Cohere's `output_dimension`. A model is cut only where
//! it is served with `min_dimensions`, to a size from that to its width; a cut embedding is
//! normalised after the cut, as the request's normalisation says.

use crate::error::ApiError;
use crate::registry::ModelVersion;

/// The size `field` asks the embeddings of `version` to be cut to: `None` for their own.
pub(crate) fn requested(
    version: &ModelVersion,
    field: &str,
    asked: Option<u64>,
) -> Result<Option<usize>, ApiError> {
    let Some(d) = asked else {
        return Ok(None);
    };
    let width = version.info.output_width;
    let min = version.settings().min_dimensions;
    match d {
        d if d == width as u64 => Ok(None),
        _ if min == 0 => Err(ApiError::invalid(format!(
            "{field} {d}: this model's embeddings have {width} values, one size (a model \
             trained to be cut is served with min_dimensions)"
        ))),
        d if d < min as u64 || d > width as u64 => Err(ApiError::invalid(format!(
            "{field} {d}: this model's embeddings may be cut to {min} to {width} values"
        ))),
        d => Ok(Some(d as usize)),
    }
}

/// Each row of `values` (`width` each) cut to its first `to` values, where asked: the rows
/// and their width.
pub(crate) fn cut(values: Vec<f32>, width: usize, to: Option<usize>) -> (Vec<f32>, usize) {
    match to {
        Some(d) if d < width && width > 0 => {
            let rows = values.chunks_exact(width).flat_map(|row| &row[..d]);
            (rows.copied().collect(), d)
        }
        _ => (values, width),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_keep_their_first_values() {
        let values: Vec<f32> = (0..8).map(|v| v as f32).collect();
        assert_eq!(cut(values.clone(), 4, Some(2)), (vec![0., 1., 4., 5.], 2));
        assert_eq!(cut(values.clone(), 4, None), (values.clone(), 4));
        assert_eq!(cut(values.clone(), 4, Some(4)), (values, 4));
    }
}
