//! How a request body fails decoding or validation: always a 400, with a message that names
//! the field, the expected value and the given one.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum RequestError {
    /// Not what the protocol allows: bad JSON, a lying binary size, a corrupt encoding.
    #[error("{0}")]
    Malformed(String),
    /// Well-formed, but not what the model takes: wrong name, shape, datatype or value.
    #[error("{0}")]
    Invalid(String),
}
