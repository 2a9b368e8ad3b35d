//! What a server needs of the devices its models run on, beyond choosing one
//! ([`crate::DeviceSpec`]): the CPU's worker threads pinned one to a core, and a GPU's
//! memory, for lending to a co-located trainer. The gateway reaches `kernels` only through
//! this crate.

pub use kernels::cpu::affinity::pin_pool_one_thread_per_core;
pub use kernels::cuda::{CudaDevice, MemoryInfo};
