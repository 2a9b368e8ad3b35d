//! Keeping the load generator off the server's cores (`--pin`): the generator on core 0,
//! everything under test on the others, so what a client measures is not the two fighting
//! over the same cores (wrk2's advice). On a two-core machine that leaves the server one
//! core, where its model and HTTP threads take turns in millisecond scheduler slices, which
//! adds tails of its own; so it is an option, not the default.

use std::os::unix::process::CommandExt;
use std::process::Command;

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

fn allowed() -> Option<Vec<usize>> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set, and the size passed is its own.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return None;
        }
        Some(
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect(),
        )
    }
}

fn set_affinity(cores: &[usize]) -> std::io::Result<()> {
    // SAFETY: as in `allowed`; CPU_SET is given indices below CPU_SETSIZE (they came from
    // `allowed`), and sched_setaffinity only reads the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cores {
            libc::CPU_SET(c, &mut set);
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Pins the calling thread, and every thread it starts from now on, to `cores`.
pub fn pin_this_thread(cores: &[usize]) -> std::io::Result<()> {
    set_affinity(cores)
}

/// Makes `cmd` start its process on `cores` only.
pub fn pin_child(cmd: &mut Command, cores: &[usize]) {
    let cores = cores.to_vec();
    // SAFETY: the closure runs between fork and exec; it makes one system call
    // (sched_setaffinity) and allocates nothing (the set lives on the stack).
    unsafe {
        cmd.pre_exec(move || set_affinity(&cores));
    }
}
