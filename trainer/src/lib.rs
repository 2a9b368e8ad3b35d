//! Co-located training: the protocol a training process speaks with the gateway
//! ([`protocol`], the `coloc-protocol` crate, documented in docs/coloc-protocol.md), a
//! client for Rust training loops ([`client`]), and tandem's reference trainer ([`run`],
//! obeying directives through [`steering`]) on real data ([`data`]), in a process of its
//! own or inside the gateway's ([`in_process`]).

pub mod affinity;
pub mod client;
pub mod data;
pub mod in_process;
pub use coloc_protocol as protocol;
pub mod run;
pub mod steering;
