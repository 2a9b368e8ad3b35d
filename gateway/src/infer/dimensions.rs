//! Embeddings cut to fewer values, for a text encoder trained so that the first values of
//! its embeddings are an embedding of their own (Matryoshka representation learning):
//! OpenAI's and TEI's `dimensions`, Cohere's `output_dimension`. A model is cut only where
//! it is served with `min_dimensions`, to a size from that to its width; a cut embedding is
//! normalised after the cut, as the request's normalisation says.

use crate::error::ApiError;

/// A size a request asked for, and the field it came in, for the refusal's message.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Asked {
    pub(crate) field: &'static str,
    pub(crate) size: Option<u64>,
}

impl Asked {
    /// No size asked: the model's own.
    pub(crate) const NONE: Asked = Asked {
        field: "dimensions",
        size: None,
    };

    /// The size to cut a model's embeddings of `width` values to, served with
    /// `min_dimensions` `min`: `None` for their own.
    pub(crate) fn checked(self, min: usize, width: usize) -> Result<Option<usize>, ApiError> {
        let field = self.field;
        let Some(d) = self.size else {
            return Ok(None);
        };
        match d {
            d if d == width as u64 => Ok(None),
            _ if min == 0 => Err(ApiError::invalid(format!(
                "{field} {d}: this model's embeddings have {width} values, one size (a model \
                 trained to be cut is served with min_dimensions)"
            ))),
            _ if min > width => Err(ApiError::invalid(format!(
                "{field} {d}: this model is served with min_dimensions {min}, more than its \
                 {width} values, so it cannot be cut; the server's configuration is wrong"
            ))),
            d if d < min as u64 || d > width as u64 => Err(ApiError::invalid(format!(
                "{field} {d}: this model's embeddings may be cut to {min} to {width} values"
            ))),
            d => Ok(Some(d as usize)),
        }
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

    fn asked(size: u64) -> Asked {
        Asked {
            field: "dimensions",
            size: Some(size),
        }
    }

    #[test]
    fn sizes_from_min_dimensions_to_the_width_are_cut_to() {
        assert_eq!(Asked::NONE.checked(0, 32).unwrap(), None);
        assert_eq!(asked(32).checked(0, 32).unwrap(), None);
        assert!(asked(16).checked(0, 32).is_err());
        assert_eq!(asked(8).checked(8, 32).unwrap(), Some(8));
        assert_eq!(asked(31).checked(8, 32).unwrap(), Some(31));
        for refused in [0, 7, 33] {
            let e = asked(refused).checked(8, 32).unwrap_err();
            assert!(e.to_string().contains("8 to 32"), "{refused}: {e}");
        }
        let e = asked(16).checked(64, 32).unwrap_err();
        assert!(e.to_string().contains("configuration"), "{e}");
    }

    #[test]
    fn rows_keep_their_first_values() {
        let values: Vec<f32> = (0..8).map(|v| v as f32).collect();
        assert_eq!(cut(values.clone(), 4, Some(2)), (vec![0., 1., 4., 5.], 2));
        assert_eq!(cut(values.clone(), 4, None), (values.clone(), 4));
        assert_eq!(cut(values.clone(), 4, Some(4)), (values, 4));
    }
}
