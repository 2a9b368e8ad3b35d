//! Which cores a CPU trainer's threads run on. With fewer streams than cores, the trainer
//! keeps to the last few cores instead of floating over all of them: serving then has
//! cores the trainer never takes, where its wake-ups find an idle core rather than one to
//! preempt, and the trainer is not migrated back and forth by each of serving's wake-ups.
//! The benchmark: a `SCHED_IDLE` loop beside `tandem serve`, pinned or floating, and
//! serving's p99 in each (`benches/ab.sh` with `NEIGHBOUR=duty80@CORE`; docs/performance.md,
//! "What a busy neighbour costs serving on this machine"). The last cores, not the first:
//! Linux keeps more of its own work on CPU 0, where a pinned loop cost serving more than one
//! that floats.

pub use kernels::cpu::affinity::{allowed_cores, pin_this_thread};

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
}
