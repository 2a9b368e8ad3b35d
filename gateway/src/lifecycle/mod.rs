//! A model version's life: the repository scanned (`repository`, with Triton's
//! `config.pbtxt` read by [`crate::triton`]), a version loaded and warmed up on its replicas
//! (`loader`), served from the registry (`registry`) until it is replaced or unloaded, and
//! Triton's repository API over the same watcher (`repository_control`).

pub mod loader;
pub mod registry;
pub mod repository;
pub mod repository_control;
