//! The response cache: answers kept by what determines them, so that a repeated input costs
//! a lookup instead of a forward pass, and leaves the device to the trainer.
//!
//! - [`store`]: one byte-bounded store for the whole server (moka: a weigher over each
//!   entry's size, TinyLFU admission so a scan of unique inputs does not wipe the hot set,
//!   an optional time to live), and the per-model metrics its entries are counted under;
//! - [`key`]: what an entry is found by: the loaded version (a number no other load ever
//!   gets) and every byte that changes the model's output;
//! - [`flight`]: one computation of a key at a time: concurrent misses of the same key wait
//!   for the first;
//! - [`found`]: a version's handle, and what one request's keys came to — found, to
//!   compute, or computed by another request.
//!
//! The inference core uses it ([`crate::infer::cached`]); a handler only reads the bypass
//! asked for and writes the outcome.

pub mod flight;
pub mod found;
pub mod key;
pub mod store;

pub use found::{Outcome, Policy, VersionCache};
pub use key::{Key, KeyWriter};
pub use store::{Answer, Entry, ResponseCache};
