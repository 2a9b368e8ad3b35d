//! How a request body fails decoding or validation: a 400 everywhere but on TEI's routes,
//! which give some kinds TEI's codes (`http::tei`), with a message that names the field,
//! the expected value and the given one.

use thiserror::Error;

#[derive(Debug, Error)]
pub enum RequestError {
    /// Not what the protocol allows: bad JSON, a lying binary size, a corrupt encoding.
    #[error("{0}")]
    Malformed(String),
    /// Well-formed, but not what the model takes: wrong name, shape, datatype or value.
    #[error("{0}")]
    Invalid(String),
    /// Nothing to run: no inputs, an empty text, a text that gives no tokens.
    #[error("{0}")]
    Empty(String),
    /// Past a limit: more inputs than a request takes, more tokens than fit.
    #[error("{0}")]
    TooLarge(String),
}
