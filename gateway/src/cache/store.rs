//! The server's one store of answers, bounded in bytes, and the per-model accounts its
//! entries are counted under.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use metrics::{Counter, Gauge};
use moka::notification::RemovalCause;

use super::key::Key;
use crate::metrics::{self as names, FloatCounter};

/// What is stored for a key.
#[derive(Debug)]
pub enum Answer {
    /// One text's or row's output (before any cut or normalisation a request asks for),
    /// and the tokens it ran.
    Row { values: Box<[f32]>, tokens: u32 },
    /// A whole request's output tensors.
    Tensors(Vec<seam::Tensor>),
}

impl Answer {
    fn size(&self) -> usize {
        match self {
            Answer::Row { values, .. } => std::mem::size_of_val(&**values),
            Answer::Tensors(tensors) => tensors.iter().map(tensor_size).sum(),
        }
    }
}

fn tensor_size(t: &seam::Tensor) -> usize {
    let data = match &t.data {
        seam::TensorData::Fixed(b) => b.len(),
        seam::TensorData::Bytes(items) => items.iter().map(|i| i.len() + 24).sum(),
    };
    std::mem::size_of::<seam::Tensor>() + t.name.len() + t.shape.len() * 8 + data
}

/// A stored answer, with what it weighs and whose it is.
#[derive(Debug)]
pub struct Entry {
    pub answer: Answer,
    weight: u32,
    account: Arc<Account>,
}

/// What an entry costs beyond its key's and answer's bytes: the store's node, its
/// frequency sketch and deque slots, the `Arc`s; an allowance the byte-bound test
/// (tests/api/cache.rs) holds the server's resident memory to.
const OVERHEAD: usize = 256;

/// The removal causes, as `tandem_cache_evictions_total`'s `reason` label spells them.
const CAUSES: [&str; 4] = ["size", "expired", "invalidated", "replaced"];

fn cause_index(cause: RemovalCause) -> usize {
    match cause {
        RemovalCause::Size => 0,
        RemovalCause::Expired => 1,
        RemovalCause::Explicit => 2,
        RemovalCause::Replaced => 3,
    }
}

/// A model's counts in the store: made once per loaded version, so a lookup does not
/// allocate labels.
#[derive(Debug)]
pub struct Account {
    bytes: Gauge,
    entries: Gauge,
    pub(crate) hits: Counter,
    pub(crate) misses: Counter,
    evictions: [Counter; CAUSES.len()],
    /// Fractions of a second: a float counter.
    saved_seconds: Arc<FloatCounter>,
    /// Where the device has a price.
    saved_usd: Option<Arc<FloatCounter>>,
}

impl Account {
    pub fn new(model: &str, priced: bool) -> Account {
        let labelled = |name: &'static str| metrics::counter!(name, "model" => model.to_string());
        Account {
            bytes: metrics::gauge!(names::CACHE_BYTES, "model" => model.to_string()),
            entries: metrics::gauge!(names::CACHE_ENTRIES, "model" => model.to_string()),
            hits: labelled(names::CACHE_HITS),
            misses: labelled(names::CACHE_MISSES),
            evictions: CAUSES.map(|reason| {
                metrics::counter!(names::CACHE_EVICTIONS, "model" => model.to_string(), "reason" => reason)
            }),
            saved_seconds: names::float_counter(names::CACHE_SAVED_DEVICE_SECONDS, &[("model", model)]),
            saved_usd: priced
                .then(|| names::float_counter(names::CACHE_SAVED_USD, &[("model", model)])),
        }
    }

    fn removed(&self, entry: &Entry, cause: RemovalCause) {
        self.bytes.decrement(f64::from(entry.weight));
        self.entries.decrement(1.0);
        self.evictions[cause_index(cause)].increment(1);
    }
}

/// The store: every loaded version's answers, `capacity` bytes in all.
pub struct ResponseCache {
    store: moka::sync::Cache<Arc<Key>, Arc<Entry>>,
    /// Larger entries are answered but not kept: one would push out many.
    max_entry: u64,
    instances: AtomicU64,
    /// What a second of the device costs, for what the cache saved.
    pub(crate) usd_per_second: f64,
}

/// The share of the capacity one entry may take at most.
pub const MAX_ENTRY_SHARE: u64 = 64;

impl ResponseCache {
    pub fn new(capacity: u64, ttl: Option<Duration>, device_hour_usd: f64) -> ResponseCache {
        let mut builder = moka::sync::Cache::builder()
            .max_capacity(capacity)
            .weigher(|_: &Arc<Key>, e: &Arc<Entry>| e.weight)
            .eviction_listener(|_, e: Arc<Entry>, cause| e.account.removed(&e, cause))
            .support_invalidation_closures();
        if let Some(ttl) = ttl {
            builder = builder.time_to_live(ttl);
        }
        ResponseCache {
            store: builder.build(),
            max_entry: capacity / MAX_ENTRY_SHARE,
            instances: AtomicU64::new(1),
            usd_per_second: device_hour_usd.max(0.0) / 3600.0,
        }
    }

    /// A number no other load of any model gets, for its keys.
    pub(crate) fn next_instance(&self) -> u64 {
        self.instances.fetch_add(1, Ordering::Relaxed)
    }

    pub fn get(&self, key: &Key) -> Option<Arc<Entry>> {
        self.store.get(key)
    }

    /// Makes `answer` an entry of `account`'s, stored when `store` and it is not too
    /// large; the entry either way, for whoever waits for it.
    pub(crate) fn insert(
        &self,
        key: Arc<Key>,
        answer: Answer,
        account: &Arc<Account>,
        store: bool,
    ) -> Arc<Entry> {
        let weight = key.size() + answer.size() + OVERHEAD;
        let entry = Arc::new(Entry {
            answer,
            weight: u32::try_from(weight).unwrap_or(u32::MAX),
            account: account.clone(),
        });
        if store && (weight as u64) <= self.max_entry {
            account.bytes.increment(f64::from(entry.weight));
            account.entries.increment(1.0);
            self.store.insert(key, entry.clone());
        }
        entry
    }

    /// Every entry of the load `instance`: unseen from now on, freed as the store gets to
    /// them.
    pub(crate) fn forget(&self, instance: u64) {
        // Only fails without `support_invalidation_closures`, which `new` sets.
        let _ = self
            .store
            .invalidate_entries_if(move |k, _| k.instance == instance);
    }

    /// Applies pending evictions and removals now, entries forgotten included (the store
    /// otherwise does it as it is used): blocking, for as long as it takes.
    pub fn settle(&self) {
        self.store.run_pending_tasks();
    }

    #[cfg(test)]
    /// Bytes stored, as the store counts them.
    pub fn weighted_size(&self) -> u64 {
        self.store.weighted_size()
    }

    /// Counts `device` time as saved by hits of `account`'s.
    pub(crate) fn saved(&self, account: &Account, device: Duration) {
        let seconds = device.as_secs_f64();
        account.saved_seconds.add(seconds);
        if let Some(usd) = &account.saved_usd {
            usd.add(seconds * self.usd_per_second);
        }
    }
}
