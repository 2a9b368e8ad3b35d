//! Co-located training: the protocol a training process speaks with the gateway
//! ([`protocol`], the `coloc-protocol` crate, documented in docs/coloc-protocol.md), a client for Rust training loops
//! ([`client`]), and tandem's reference trainer ([`run`]) on real data ([`data`]).

pub mod affinity;
pub mod client;
pub mod data;
pub use coloc_protocol as protocol;
pub mod run;
