//! Device memory serving takes back from trainers: a pure rule from the GPU's free memory
//! (read every tick) to how much each trainer may hold.
//!
//! Serving keeps a reserve free: a tenth of the device's memory, at least 1 GiB (and at
//! most half) — room to load a new model version or grow a batch's buffers without
//! waiting. While free memory is below the reserve, trainers are asked for the shortfall:
//! each trainer's memory limit becomes what it holds (its last ack) less its part of the
//! shortfall, in proportion to what it holds. Once free memory is back above the reserve,
//! the limits hold where they are until free memory exceeds twice the reserve; then they
//! lift, and trainers are lent memory by the allowance alone again. A trainer frees down
//! to its limit at its next step boundary and acks what it holds. It cannot go below the
//! least it runs in (its weights and optimiser state, which a pause keeps too): what it
//! acks there is the floor.

/// What serving needs back, as the rule decides it at a reading.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Squeeze {
    /// Trainers are lent memory by the allowance alone.
    None,
    /// Trainers hold at most what they hold now, less these bytes among them.
    Take(u64),
}

/// The rule's state: the reserve, and whether limits are held.
#[derive(Clone, Debug)]
pub struct MemoryGuard {
    reserve: Option<u64>,
    squeezing: bool,
}

/// A tenth of the device, at least 1 GiB, at most half.
pub fn reserve_for(total: u64) -> u64 {
    (total / 10).max(1 << 30).min(total / 2)
}

impl MemoryGuard {
    pub fn new() -> MemoryGuard {
        MemoryGuard {
            reserve: None,
            squeezing: false,
        }
    }

    /// The reserve in force, once a reading has said how large the device is.
    #[cfg(test)]
    pub fn reserve(&self) -> Option<u64> {
        self.reserve
    }

    /// Takes a reading of the device's free and total memory.
    pub fn update(&mut self, free: u64, total: u64) -> Squeeze {
        let reserve = *self.reserve.get_or_insert_with(|| reserve_for(total));
        if free < reserve {
            if !self.squeezing {
                tracing::info!(
                    free_bytes = free,
                    reserve_bytes = reserve,
                    "device memory low: asking trainers for memory back"
                );
            }
            self.squeezing = true;
            return Squeeze::Take(reserve - free);
        }
        if self.squeezing && free < reserve.saturating_mul(2) {
            return Squeeze::Take(0);
        }
        if self.squeezing {
            tracing::info!(
                free_bytes = free,
                "device memory recovered: trainers' memory limits lifted"
            );
        }
        self.squeezing = false;
        Squeeze::None
    }
}

impl Default for MemoryGuard {
    fn default() -> Self {
        MemoryGuard::new()
    }
}

/// The memory limit of a trainer holding `held` of the trainers' `all_held` bytes, under
/// `squeeze`; `None` when only the allowance limits it.
pub fn cap(squeeze: Squeeze, held: u64, all_held: u64) -> Option<u64> {
    match squeeze {
        Squeeze::None => None,
        Squeeze::Take(bytes) => {
            let part = if all_held == 0 {
                0
            } else {
                (bytes as u128 * held as u128 / all_held as u128) as u64
            };
            Some(held.saturating_sub(part))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn the_reserve_is_a_tenth_within_bounds() {
        assert_eq!(reserve_for(141 * GIB), 141 * GIB / 10);
        assert_eq!(reserve_for(8 * GIB), GIB);
        assert_eq!(reserve_for(GIB), GIB / 2);
    }

    #[test]
    fn a_shortfall_is_asked_back_and_limits_hold_until_twice_the_reserve_is_free() {
        let total = 100 * GIB;
        let mut g = MemoryGuard::new();
        assert_eq!(g.update(50 * GIB, total), Squeeze::None);
        assert_eq!(g.reserve(), Some(10 * GIB));
        // Below the reserve: the shortfall.
        assert_eq!(g.update(7 * GIB, total), Squeeze::Take(3 * GIB));
        // Back above it, but not above twice: limits hold.
        assert_eq!(g.update(12 * GIB, total), Squeeze::Take(0));
        assert_eq!(g.update(19 * GIB, total), Squeeze::Take(0));
        // Above twice: lifted.
        assert_eq!(g.update(21 * GIB, total), Squeeze::None);
        assert_eq!(g.update(15 * GIB, total), Squeeze::None);
    }

    #[test]
    fn the_shortfall_is_shared_in_proportion_to_what_each_holds() {
        let take = Squeeze::Take(3 * GIB);
        assert_eq!(cap(take, 4 * GIB, 6 * GIB), Some(2 * GIB));
        assert_eq!(cap(take, 2 * GIB, 6 * GIB), Some(GIB));
        // Holding: what each holds now.
        assert_eq!(cap(Squeeze::Take(0), 5 * GIB, 6 * GIB), Some(5 * GIB));
        // More asked than held: nothing left, never below zero.
        assert_eq!(cap(Squeeze::Take(10 * GIB), GIB, GIB), Some(0));
        assert_eq!(cap(Squeeze::None, GIB, GIB), None);
        assert_eq!(cap(take, 0, 0), Some(0));
    }
}
