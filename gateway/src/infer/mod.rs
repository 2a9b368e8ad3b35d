//! The inference core: what stands between a protocol's handlers (HTTP's APIs today) and a
//! model version's batcher, as TEI's `infer.rs` stands between its router and its queue.
//! A handler only turns its wire format into a core request and the core's answer into its
//! wire format; everything between is here, for every API alike:
//!
//! - [`Core`], one per loaded version: admission (the refusals before parsing,
//!   [`admission`]; the predicted-miss shed and the deadlines the batcher applies),
//!   submission into the bounded queue, the wait for the answer, every refusal counted once
//!   under its reason;
//! - [`validated`]: a request validated against the model's signature, run;
//! - [`text`]: a text request checked against the task, [`tokenize`]d, split into batches,
//!   run, and post-processed ([`dimensions`], normalising; [`scores`] for a classifier);
//! - [`cached`]: the response cache in front of all of that, for models that use it: inputs
//!   found there answered without admission, the rest computed and stored;
//! - [`record`]: an answered request's latency back to the batcher and into the statistics;
//! - [`phases`]: the points a request passed, for its trace.
//!
//! The way through: [`Core::admit_unparsed`] with the request's arrival, then decoding (the
//! protocol's) and validation, then [`validated::run`] or [`text::run`], then [`record`] once
//! the response is ready.

pub mod admission;
pub mod cached;
pub mod dimensions;
pub mod input;
pub mod outcome;
pub mod phases;
mod record;
pub mod scores;
pub mod signals;
pub mod text;
pub mod tokenize;
pub mod validated;
mod version_core;

pub use admission::{Arrival, Door};
pub use outcome::InferError;
pub use record::record;
pub use version_core::{Core, Submission};
