//! Keeping the load generator off the server's cores (`--pin`): the generator on core 0,
//! everything under test on the others, so what a client measures is not the two fighting
//! over the same cores (wrk2's advice). On a two-core machine that leaves the server one
//! core, where its model and HTTP threads take turns in millisecond scheduler slices, which
//! adds tails of its own; so it is an option, not the default.

use std::os::unix::process::CommandExt;
use std::process::Command;

use trainer::affinity::allowed_cores as allowed;
pub use trainer::affinity::pin_this_thread;

/// Which cores the system under test gets, and which the load generator.
#[derive(Clone, Debug)]
pub struct CoreSplit {
    pub server: Vec<usize>,
    pub client: Vec<usize>,
}

/// The split of this process's allowed cores: the first for the client, the rest for the
/// server; `None` with fewer than two cores (nothing to split) or when pinning is off.
pub fn split(pin: bool) -> Option<CoreSplit> {
    let cores = allowed()?;
    if !pin || cores.len() < 2 {
        return None;
    }
    Some(CoreSplit {
        client: cores[..1].to_vec(),
        server: cores[1..].to_vec(),
    })
}

/// Makes `cmd` start its process on `cores` only.
pub fn pin_child(cmd: &mut Command, cores: &[usize]) {
    let cores = cores.to_vec();
    // SAFETY: the closure runs between fork and exec; it makes one system call
    // (sched_setaffinity) and allocates nothing (the set lives on the stack).
    unsafe {
        cmd.pre_exec(move || pin_this_thread(&cores));
    }
}
