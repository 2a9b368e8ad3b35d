//! Which cores a thread runs on: the cores this process may use, pinning a thread to some
//! of them, and a pool whose layers are split over its threads pinned one thread per core.
//!
//! A forward pass whose layers are split over a pool's threads wakes them at every layer.
//! Left to float, a woken thread is often queued on the core of the thread that woke it
//! (the scheduler's wake-affine placement), and the layer's pieces run one after another on
//! that core. One thread per core, each woken on its own core, runs them side by side. The
//! benchmark: `benches/text_alone.py` (docs/performance.md, "One text at a time").

/// The cores this process may run on (its affinity mask when it started).
pub fn allowed_cores() -> Option<Vec<usize>> {
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

/// Pins the calling thread (and the threads it starts from now on) to `cores`.
pub fn pin_this_thread(cores: &[usize]) -> std::io::Result<()> {
    // SAFETY: as in `allowed_cores`; CPU_SET is given only indices below CPU_SETSIZE, and
    // sched_setaffinity only reads the set. No allocation: safe between fork and exec too.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for &c in cores {
            if c < libc::CPU_SETSIZE as usize {
                libc::CPU_SET(c, &mut set);
            }
        }
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Pins each thread of the current rayon pool to a core of its own, in order over the cores
/// this process may run on, where the pool has exactly one thread per such core: it then
/// uses the same cores as before, each thread always on the same one. Elsewhere (outside a
/// pool, fewer threads than cores, or more) the threads keep floating, so that pools and
/// replicas of fewer threads are not piled onto the first cores.
pub fn pin_pool_one_thread_per_core() -> std::io::Result<bool> {
    let Some(cores) = allowed_cores() else {
        return Ok(false);
    };
    if rayon::current_thread_index().is_none() || rayon::current_num_threads() != cores.len() {
        return Ok(false);
    }
    let pinned: std::io::Result<Vec<()>> = rayon::broadcast(|ctx| {
        let core = cores[ctx.index()];
        pin_this_thread(&[core])
    })
    .into_iter()
    .collect();
    pinned.map(|_| true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_can_be_pinned_and_released() {
        let all = allowed_cores().expect("sched_getaffinity");
        let last = *all.last().unwrap();
        std::thread::spawn(move || {
            pin_this_thread(&[last]).unwrap();
            assert_eq!(allowed_cores().unwrap(), vec![last]);
            pin_this_thread(&all).unwrap();
            assert_eq!(allowed_cores().unwrap(), all);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_pool_of_one_thread_per_core_is_pinned_one_thread_per_core() {
        let all = allowed_cores().expect("sched_getaffinity");
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(all.len())
            .build()
            .unwrap();
        assert!(pool.install(pin_pool_one_thread_per_core).unwrap());
        let placed = pool.broadcast(|ctx| (ctx.index(), allowed_cores().unwrap()));
        for (index, cores) in placed {
            assert_eq!(cores, vec![all[index]], "thread {index}");
        }
    }

    #[test]
    fn other_pools_and_other_threads_keep_floating() {
        let all = allowed_cores().expect("sched_getaffinity");
        assert!(!pin_pool_one_thread_per_core().unwrap(), "outside a pool");
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(all.len() + 1)
            .build()
            .unwrap();
        assert!(!pool.install(pin_pool_one_thread_per_core).unwrap());
        for cores in pool.broadcast(|_| allowed_cores().unwrap()) {
            assert_eq!(cores, all);
        }
    }
}
