//! Which cores a CPU trainer's threads run on. With fewer streams than cores, the trainer
//! keeps to the last few cores instead of floating over all of them: serving then has
//! cores the trainer never takes, where its wake-ups find an idle core rather than one to
//! preempt, and the trainer is not migrated back and forth by each of serving's wake-ups.
//! The benchmark: a `SCHED_IDLE` loop beside `tandem serve`, pinned or floating, and
//! serving's p99 in each (`benches/ab.sh` with `NEIGHBOUR=duty80@CORE`; docs/performance.md,
//! "What a busy neighbour costs serving on this machine"). The last cores, not the first:
//! Linux keeps more of its own work on CPU 0, where a pinned loop cost serving more than one
//! that floats.

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

/// The cores for `streams` threads out of `allowed`: the last `streams` of them, or all
/// of them when the streams take every core anyway (or more).
pub fn cores_for_streams(allowed: &[usize], streams: usize) -> &[usize] {
    if streams == 0 || streams >= allowed.len() {
        allowed
    } else {
        &allowed[allowed.len() - streams..]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fewer_streams_than_cores_take_the_last_cores() {
        let all = [0, 1, 2, 3];
        assert_eq!(cores_for_streams(&all, 1), &[3]);
        assert_eq!(cores_for_streams(&all, 3), &[1, 2, 3]);
        assert_eq!(cores_for_streams(&all, 4), &all);
        assert_eq!(cores_for_streams(&all, 9), &all);
        assert_eq!(cores_for_streams(&all, 0), &all);
        assert_eq!(cores_for_streams(&[5, 7], 1), &[7]);
    }

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
}
