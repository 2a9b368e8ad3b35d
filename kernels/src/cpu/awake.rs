//! Keeping a pool's threads awake through a forward pass whose layers are split over them.
//!
//! Between two parallel layers the pool's idle threads spin only briefly before they sleep,
//! and the next layer must wake them. On a virtual machine a sleeping thread's core may be
//! halted, and waking it takes the host's time; the layer's pieces meanwhile run on the
//! threads that are awake. A thread that stays awake through the whole pass wakes once, and
//! is there for every layer. The benchmark: `benches/text_alone.py` (docs/performance.md,
//! "One text at a time").

use std::sync::atomic::{AtomicBool, Ordering};

/// Runs `f` on this thread while the other threads of the current rayon pool stay awake,
/// taking the pieces of `f`'s parallel work as they come; returns `f`'s result once they
/// stop.
///
/// Outside a pool, or in a pool of one thread, it only runs `f`. Staying awake costs those
/// threads' CPU for as long as `f` runs, where no other thread wants their cores: use it
/// where `f` splits its work over them anyway.
pub fn with_pool_awake<R>(f: impl FnOnce() -> R) -> R {
    let Some(me) = rayon::current_thread_index() else {
        return f();
    };
    let others = rayon::current_num_threads() - 1;
    if others == 0 {
        return f();
    }
    let done = AtomicBool::new(false);
    // Set however `f` ends: a panic in it must reach the caller, not leave the scope
    // waiting on spinners that never stop.
    struct Done<'a>(&'a AtomicBool);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::Release);
        }
    }
    rayon::in_place_scope(|s| {
        for _ in 0..others {
            // A spinner this thread picks up itself (while it waits for a layer, or when the
            // scope ends before another thread took it) returns at once: it must never spin
            // on the thread that would set `done`.
            s.spawn(|_| {
                if rayon::current_thread_index() == Some(me) {
                    return;
                }
                spin_until(&done);
            });
        }
        let _done = Done(&done);
        f()
    })
}

/// Runs the pool's pending work until `done`. With none, it offers the core to any other
/// thread that is ready to run there (the HTTP front end shares these cores) and otherwise
/// keeps it: a thread that stays runnable never lets its core halt.
fn spin_until(done: &AtomicBool) {
    while !done.load(Ordering::Acquire) {
        if rayon::yield_now() != Some(rayon::Yield::Executed) {
            std::thread::yield_now();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;
    use std::sync::Mutex;

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a test pool")
    }

    #[test]
    fn outside_a_pool_it_only_runs_f() {
        assert_eq!(with_pool_awake(|| 7), 7);
    }

    #[test]
    fn in_a_pool_of_one_it_only_runs_f() {
        assert_eq!(pool(1).install(|| with_pool_awake(|| 7)), 7);
    }

    #[test]
    fn the_other_threads_take_the_parallel_work_and_stop_when_it_ends() {
        let threads = 3;
        let seen = Mutex::new(HashSet::new());
        let sum: u64 = pool(threads).install(|| {
            with_pool_awake(|| {
                rayon::scope(|s| {
                    for _ in 0..64 {
                        s.spawn(|_| {
                            // Long enough that the spinners come round to take some.
                            std::thread::sleep(std::time::Duration::from_millis(1));
                            let index = rayon::current_thread_index();
                            seen.lock().expect("not poisoned").insert(index);
                        });
                    }
                });
                (1..=100u64).sum()
            })
        });
        assert_eq!(sum, 5050);
        let seen = seen.into_inner().expect("not poisoned");
        assert!(seen.len() > 1, "only one thread ran the pieces: {seen:?}");
    }

    #[test]
    fn a_panic_in_the_pass_reaches_the_caller_instead_of_hanging() {
        let pool = pool(2);
        let caught = pool.install(|| {
            std::panic::catch_unwind(|| {
                with_pool_awake(|| {
                    rayon::join(|| (), || ());
                    panic!("the pass failed");
                })
            })
        });
        assert!(caught.is_err());
        // The pool still works.
        assert_eq!(
            pool.install(|| with_pool_awake(|| rayon::join(|| 1, || 2))),
            (1, 2)
        );
    }

    #[test]
    fn passes_one_after_another_neither_hang_nor_leave_work_behind() {
        let pool = pool(2);
        for round in 0..200u64 {
            let got = pool.install(|| with_pool_awake(|| round * 2));
            assert_eq!(got, round * 2);
        }
        // A pass with no parallel work at all, then one with: the spinners of the first
        // must not be waiting on this thread's deque for the second.
        let got = pool.install(|| {
            with_pool_awake(|| ());
            with_pool_awake(|| rayon::join(|| 1, || 2))
        });
        assert_eq!(got, (1, 2));
    }
}
