//! The Open Inference Protocol's REST half (KServe v2), with Triton's extensions: infer,
//! health, server and model metadata, model configuration and statistics, and the model
//! repository's index, load and unload.

mod infer;
mod models;
mod repository;

pub use infer::infer;
pub use models::*;
pub use repository::{index, index_entries, load, load_model, unload, unload_model};
