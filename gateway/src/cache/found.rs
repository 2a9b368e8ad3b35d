//! A loaded version's handle on the store, and what one request's keys came to.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::time::error::Elapsed;

use super::flight::{Claim, Flights, Joined, Waiter};
use super::store::Account;
use super::{Answer, Entry, Key, KeyWriter, ResponseCache};

/// What a request lets the cache do: `parameters.cache = false` neither; HTTP's
/// `Cache-Control: no-cache` no lookup, `no-store` no storing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Policy {
    pub lookup: bool,
    pub store: bool,
}

impl Policy {
    pub const USE: Policy = Policy {
        lookup: true,
        store: true,
    };

    /// Both this and `other` allow it.
    pub fn and(self, other: Policy) -> Policy {
        Policy {
            lookup: self.lookup && other.lookup,
            store: self.store && other.store,
        }
    }
}

impl Default for Policy {
    fn default() -> Self {
        Policy::USE
    }
}

/// How a request was answered, as `x-tandem-cache` says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every input from the cache (or from another request's computation of it).
    Hit,
    /// Nothing from the cache.
    Miss,
    Partial,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Hit => "hit",
            Outcome::Miss => "miss",
            Outcome::Partial => "partial",
        }
    }
}

/// A loaded version's share of the store: its keys start with a number no other load gets,
/// and its entries go when it does.
pub struct VersionCache {
    cache: Arc<ResponseCache>,
    /// Its keys being computed now (keys of no other version's).
    flights: Arc<Flights>,
    instance: u64,
    account: Arc<Account>,
}

impl VersionCache {
    pub fn new(cache: Arc<ResponseCache>, model: &str) -> VersionCache {
        VersionCache {
            instance: cache.next_instance(),
            account: Arc::new(Account::new(model, cache.usd_per_second > 0.0)),
            flights: Arc::default(),
            cache,
        }
    }

    /// A key of this version's, to write its fields into.
    pub fn key(&self) -> KeyWriter {
        KeyWriter::new(self.instance)
    }

    /// Every entry of this version's: unseen from now on.
    pub fn clear(&self) {
        self.cache.forget(self.instance);
    }

    /// Counts `device` time as saved by this version's hits.
    pub fn saved(&self, device: Duration) {
        self.cache.saved(&self.account, device);
    }

    /// Looks each key up, as `policy` allows: found, computed by another request now, or
    /// this request's to compute. A key the request holds twice is computed once.
    pub fn find(&self, keys: Vec<Key>, policy: Policy) -> Found<'_> {
        let started = Instant::now();
        let mut first: std::collections::HashMap<Arc<Key>, usize> = Default::default();
        let slots: Vec<Slot> = (keys.into_iter().enumerate())
            .map(|(i, key)| match first.get(&key) {
                Some(&earlier) => Slot::Same(earlier),
                None => {
                    let key = Arc::new(key);
                    first.insert(key.clone(), i);
                    self.slot(key, policy)
                }
            })
            .collect();
        Found {
            version: self,
            policy,
            mine: vec![false; slots.len()],
            slots,
            computed: 0,
            spent: started.elapsed(),
        }
    }

    fn slot(&self, key: Arc<Key>, policy: Policy) -> Slot {
        if !policy.lookup {
            return Slot::Compute(key);
        }
        if let Some(entry) = self.cache.get(&key) {
            return Slot::Ready(entry);
        }
        self.computing(key, policy)
    }

    /// A key not found: this request's to compute, or another's it waits for.
    fn computing(&self, key: Arc<Key>, policy: Policy) -> Slot {
        if !policy.store {
            return Slot::Compute(key);
        }
        match self.flights.join(key.clone()) {
            Joined::Wait(waiter) => Slot::Waiting(key, waiter),
            Joined::Claim(claim) => Slot::Claimed(claim),
        }
    }
}

impl Drop for VersionCache {
    fn drop(&mut self) {
        self.clear();
    }
}

enum Slot {
    Ready(Arc<Entry>),
    /// This request computes it, for others too.
    Claimed(Claim),
    /// This request computes it, alone: it may not wait for others (no lookup), or its
    /// answer is not to be stored.
    Compute(Arc<Key>),
    Waiting(Arc<Key>, Waiter),
    /// The same key as the input at this index of the request.
    Same(usize),
    /// Moved out while it is filled or waited for.
    Taken,
}

/// One request's keys, in its inputs' order.
pub struct Found<'a> {
    version: &'a VersionCache,
    policy: Policy,
    slots: Vec<Slot>,
    /// Inputs this request computed, and which.
    computed: usize,
    mine: Vec<bool>,
    /// Time spent looking up and storing: Triton's `cache_hit` / `cache_miss` durations.
    spent: Duration,
}

impl Found<'_> {
    /// The inputs this request computes, in order.
    pub fn missing(&self) -> Vec<usize> {
        let mine = |s: &Slot| matches!(s, Slot::Claimed(_) | Slot::Compute(_));
        (0..self.slots.len())
            .filter(|&i| mine(&self.slots[i]))
            .collect()
    }

    /// Whether some inputs are being computed by other requests.
    pub fn waits(&self) -> bool {
        self.slots.iter().any(|s| matches!(s, Slot::Waiting(..)))
    }

    /// Stores what this request computed (as the policy allows), hands it to whoever waits
    /// for it, and takes it as this request's answer.
    pub fn fill(&mut self, computed: impl IntoIterator<Item = (usize, Answer)>) {
        let started = Instant::now();
        let cache = &self.version.cache;
        let account = &self.version.account;
        for (i, answer) in computed {
            let entry = match std::mem::replace(&mut self.slots[i], Slot::Taken) {
                Slot::Claimed(claim) => {
                    let entry = cache.insert(claim.key().clone(), answer, account, true);
                    claim.land(entry.clone());
                    entry
                }
                Slot::Compute(key) => cache.insert(key, answer, account, self.policy.store),
                other => {
                    self.slots[i] = other;
                    continue;
                }
            };
            self.slots[i] = Slot::Ready(entry);
            self.mine[i] = true;
            self.computed += 1;
        }
        self.spent += started.elapsed();
    }

    /// Waits, until `deadline` at the latest, for the inputs other requests compute. One
    /// whose request ended without an answer is looked for again: found, waited for anew,
    /// or this request's to compute ([`Found::missing`]), so that of the requests waiting
    /// for it one computes it, not all. `Err` when the deadline passed first.
    pub async fn wait(&mut self, deadline: tokio::time::Instant) -> Result<(), Elapsed> {
        let waiting: Vec<(usize, Arc<Key>, Waiter)> = (self.slots.iter_mut().enumerate())
            .filter_map(|(i, s)| match std::mem::replace(s, Slot::Taken) {
                Slot::Waiting(key, w) => Some((i, key, w)),
                other => {
                    *s = other;
                    None
                }
            })
            .collect();
        if waiting.is_empty() {
            return Ok(());
        }
        let answers = async {
            let mut answers = Vec::with_capacity(waiting.len());
            // All are needed, so awaiting them in turn takes as long as the slowest.
            for (i, key, waiter) in waiting {
                answers.push((i, key, waiter.answer().await));
            }
            answers
        };
        for (i, key, answer) in tokio::time::timeout_at(deadline, answers).await? {
            self.slots[i] = match answer {
                Some(entry) => Slot::Ready(entry),
                None => self.version.slot(key, self.policy),
            };
        }
        Ok(())
    }

    /// Every input's entry in order, and how the request was answered; counted as hits
    /// and misses. `None` while some are still to compute or wait for.
    pub fn finish(self) -> Option<(Vec<Arc<Entry>>, Outcome)> {
        let total = self.slots.len();
        let mut entries: Vec<Arc<Entry>> = Vec::with_capacity(total);
        let mut repeats = 0;
        for slot in &self.slots {
            entries.push(match slot {
                Slot::Ready(entry) => entry.clone(),
                // A key held twice is found, or computed, as its first is.
                Slot::Same(first) => {
                    repeats += usize::from(self.mine[*first]);
                    entries.get(*first)?.clone()
                }
                _ => return None,
            });
        }
        let computed = self.computed + repeats;
        let found = total - computed;
        if self.policy.lookup {
            let account = &self.version.account;
            account.hits.increment(found as u64);
            account.misses.increment(self.computed as u64);
        }
        let outcome = match (found, computed) {
            (_, 0) if total > 0 => Outcome::Hit,
            (0, _) => Outcome::Miss,
            _ => Outcome::Partial,
        };
        Some((entries, outcome))
    }

    /// Inputs this request computed so far.
    pub fn computed(&self) -> usize {
        self.computed
    }

    /// Time spent in the store so far.
    pub fn spent(&self) -> Duration {
        self.spent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(v: f32) -> Answer {
        Answer::Row {
            values: vec![v; 4].into(),
            tokens: 3,
        }
    }

    fn value(e: &Entry) -> f32 {
        match &e.answer {
            Answer::Row { values, .. } => values[0],
            Answer::Tensors(_) => unreachable!(),
        }
    }

    fn soon(ms: u64) -> tokio::time::Instant {
        tokio::time::Instant::now() + Duration::from_millis(ms)
    }

    fn version(capacity: u64) -> VersionCache {
        let cache = Arc::new(ResponseCache::new(capacity, None, 0.0));
        VersionCache::new(cache, "m")
    }

    fn keys(v: &VersionCache, texts: &[&str]) -> Vec<Key> {
        texts
            .iter()
            .map(|t| v.key().field(t.as_bytes()).key())
            .collect()
    }

    #[tokio::test]
    async fn a_second_request_finds_what_the_first_computed_in_order() {
        let v = version(1 << 20);
        let mut first = v.find(keys(&v, &["a", "b"]), Policy::USE);
        assert_eq!(first.missing(), [0, 1]);
        first.fill([(0, row(1.0)), (1, row(2.0))]);
        let (_, outcome) = first.finish().unwrap();
        assert_eq!(outcome, Outcome::Miss);
        let mut second = v.find(keys(&v, &["c", "a", "b"]), Policy::USE);
        assert_eq!(second.missing(), [0]);
        second.fill([(0, row(3.0))]);
        second.wait(soon(1000)).await.unwrap();
        let (entries, outcome) = second.finish().unwrap();
        assert_eq!(outcome, Outcome::Partial);
        let values: Vec<f32> = entries.iter().map(|e| value(e)).collect();
        assert_eq!(values, [3.0, 1.0, 2.0]);
        let third = v.find(keys(&v, &["b"]), Policy::USE);
        assert_eq!(third.finish().unwrap().1, Outcome::Hit);
    }

    #[tokio::test]
    async fn concurrent_misses_of_a_key_wait_for_the_one_computing_it() {
        let v = version(1 << 20);
        let mut leader = v.find(keys(&v, &["x"]), Policy::USE);
        let mut follower = v.find(keys(&v, &["x", "y"]), Policy::USE);
        // The follower computes only what no one else is computing.
        assert_eq!(follower.missing(), [1]);
        follower.fill([(1, row(9.0))]);
        let waiting = async {
            follower.wait(soon(5000)).await.unwrap();
            follower.finish().unwrap()
        };
        let computing = async {
            tokio::task::yield_now().await;
            leader.fill([(0, row(7.0))]);
            leader.finish().unwrap()
        };
        let ((entries, outcome), _) = tokio::join!(waiting, computing);
        assert_eq!(outcome, Outcome::Partial);
        assert_eq!(value(&entries[0]), 7.0);
        assert_eq!(value(&entries[1]), 9.0);
    }

    #[tokio::test]
    async fn a_key_whose_computing_request_gives_up_is_computed_by_its_waiter() {
        let v = version(1 << 20);
        let leader = v.find(keys(&v, &["x"]), Policy::USE);
        let mut follower = v.find(keys(&v, &["x"]), Policy::USE);
        assert!(follower.missing().is_empty());
        drop(leader);
        follower.wait(soon(5000)).await.unwrap();
        assert_eq!(follower.missing(), [0]);
        follower.fill([(0, row(5.0))]);
        let (entries, outcome) = follower.finish().unwrap();
        assert_eq!((value(&entries[0]), outcome), (5.0, Outcome::Miss));
        // Of two requests waiting for a key whose computing request gave up, one computes
        // it and the other waits for that.
        let leader = v.find(keys(&v, &["y"]), Policy::USE);
        let mut a = v.find(keys(&v, &["y"]), Policy::USE);
        let mut b = v.find(keys(&v, &["y"]), Policy::USE);
        drop(leader);
        a.wait(soon(5000)).await.unwrap();
        assert_eq!(a.missing(), [0]);
        let b_waits = async {
            while b.waits() {
                b.wait(soon(5000)).await.unwrap();
            }
            assert!(b.missing().is_empty());
            b.finish().unwrap()
        };
        let a_computes = async {
            tokio::task::yield_now().await;
            a.fill([(0, row(6.0))]);
            a.finish().unwrap()
        };
        let ((b_entries, b_outcome), _) = tokio::join!(b_waits, a_computes);
        assert_eq!((value(&b_entries[0]), b_outcome), (6.0, Outcome::Hit));
        // A waiter that waits too long says so.
        let _leader = v.find(keys(&v, &["z"]), Policy::USE);
        let mut late = v.find(keys(&v, &["z"]), Policy::USE);
        assert!(late.wait(soon(10)).await.is_err());
    }

    #[tokio::test]
    async fn a_key_held_twice_is_computed_once_and_counted_as_computed() {
        let v = version(1 << 20);
        let mut f = v.find(keys(&v, &["a", "b", "a"]), Policy::USE);
        assert_eq!(f.missing(), [0, 1]);
        f.fill([(0, row(1.0)), (1, row(2.0))]);
        let (entries, outcome) = f.finish().unwrap();
        let values: Vec<f32> = entries.iter().map(|e| value(e)).collect();
        assert_eq!((values, outcome), (vec![1.0, 2.0, 1.0], Outcome::Miss));
        let f = v.find(keys(&v, &["a", "c", "a"]), Policy::USE);
        assert_eq!(f.missing(), [1]);
        let f = v.find(keys(&v, &["a", "a"]), Policy::USE);
        assert_eq!(f.finish().unwrap().1, Outcome::Hit);
    }

    #[tokio::test]
    async fn bypasses_neither_look_up_nor_store_as_asked() {
        let v = version(1 << 20);
        let no_store = Policy {
            lookup: true,
            store: false,
        };
        let mut f = v.find(keys(&v, &["a"]), no_store);
        f.fill([(0, row(1.0))]);
        f.finish().unwrap();
        assert_eq!(v.find(keys(&v, &["a"]), Policy::USE).missing(), [0]);
        let mut f = v.find(keys(&v, &["b"]), Policy::USE);
        f.fill([(0, row(2.0))]);
        f.finish().unwrap();
        let no_cache = Policy {
            lookup: false,
            store: true,
        };
        let mut f = v.find(keys(&v, &["b"]), no_cache);
        assert_eq!(f.missing(), [0]);
        f.fill([(0, row(3.0))]);
        assert_eq!(value(&f.finish().unwrap().0[0]), 3.0);
        // What it computed replaced what was there.
        let found = v.find(keys(&v, &["b"]), Policy::USE).finish().unwrap();
        assert_eq!(value(&found.0[0]), 3.0);
    }

    #[tokio::test]
    async fn stays_within_its_bytes_and_forgets_a_cleared_version() {
        let capacity = 256 * 1024;
        let v = version(capacity);
        let big = |i: usize| Answer::Row {
            values: vec![i as f32; 256].into(),
            tokens: 0,
        };
        for i in 0..5_000 {
            let mut f = v.find(keys(&v, &[&i.to_string()]), Policy::USE);
            f.fill([(0, big(i))]);
            f.finish().unwrap();
        }
        v.cache.settle();
        assert!(
            v.cache.weighted_size() <= capacity,
            "{}",
            v.cache.weighted_size()
        );
        assert!(v.cache.weighted_size() > capacity / 2);
        // Entries over a 64th of the capacity are answered, not kept.
        let mut f = v.find(keys(&v, &["huge"]), Policy::USE);
        let huge = Answer::Row {
            values: vec![0.0; 8192].into(),
            tokens: 0,
        };
        f.fill([(0, huge)]);
        f.finish().unwrap();
        assert_eq!(v.find(keys(&v, &["huge"]), Policy::USE).missing(), [0]);
        let mut f = v.find(keys(&v, &["kept"]), Policy::USE);
        f.fill([(0, row(1.0))]);
        f.finish().unwrap();
        v.clear();
        assert_eq!(v.find(keys(&v, &["kept"]), Policy::USE).missing(), [0]);
    }
}
