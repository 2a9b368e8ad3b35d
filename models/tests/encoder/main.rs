//! The encoders end to end, in one test binary, one module per area: loading folders of every
//! family and refusing bad ones, the tokenizer, each family's numerics against transformers
//! (or a float64 reference), precisions, heads, and the same bodies on CUDA where there is a
//! device.

#[path = "../support/mod.rs"]
mod support;

mod basics;
mod bf16_products;
mod bf16x3_products;
mod classifier;
mod decoders;
mod families;
mod gte;
mod load;
mod load_dense;
mod load_modernbert;
mod load_st6;
mod nomic;
mod sparse;
mod token_states;
mod tokenizer;
