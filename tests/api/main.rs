//! The server's API end to end, in one test binary: the real `tandem` on 127.0.0.1:0 and
//! real clients, one module per area. (The tests that load the machine or measure it, and
//! the co-location and CUDA ones, are binaries of their own beside this one.)

#[path = "../support/mod.rs"]
mod support;

mod admin;
mod adversarial;
mod arrays;
mod auth;
mod cache;
mod edge;
mod grpc;
mod lifecycle;
mod malformed;
mod onnx;
mod otlp;
mod repository;
mod serve_api;
mod text_apis;
mod text_classify;
mod text_cohere_embed;
mod text_decoders;
mod text_rerank;
mod text_serving;
mod text_tei;
mod tls;
mod tooling;
