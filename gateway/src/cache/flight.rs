//! Single flight: the first request to miss a key computes it; others that miss it before
//! the answer is stored wait for that answer instead of computing it again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::{Entry, Key};

type Slot = watch::Sender<Option<Arc<Entry>>>;

/// The keys being computed now, each with the channel its answer goes out on.
#[derive(Default)]
pub struct Flights {
    computing: Mutex<HashMap<Arc<Key>, Slot>>,
}

/// Whose a missed key is.
pub enum Joined {
    /// This request computes it, and hands it to whoever waits.
    Claim(Claim),
    /// Another request computes it.
    Wait(Waiter),
}

impl Flights {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<Key>, Slot>> {
        self.computing.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Joins the flight of `key`, or starts it. Only the map is touched under the lock: an
    /// answer stored and its flight ended between the caller's lookup and this is computed
    /// once more, which is rarer and cheaper than the store's housekeeping under the lock.
    pub fn join(self: &Arc<Self>, key: Arc<Key>) -> Joined {
        let mut computing = self.lock();
        if let Some(slot) = computing.get(&key) {
            return Joined::Wait(Waiter(slot.subscribe()));
        }
        computing.insert(key.clone(), watch::channel(None).0);
        Joined::Claim(Claim {
            flights: self.clone(),
            key,
            landed: false,
        })
    }
}

/// A key this request computes. Dropped without [`Claim::land`] (the request failed or
/// was cancelled), its waiters are told to compute it themselves.
pub struct Claim {
    flights: Arc<Flights>,
    key: Arc<Key>,
    landed: bool,
}

impl Claim {
    pub fn key(&self) -> &Arc<Key> {
        &self.key
    }

    /// Hands the answer to every waiter and ends the flight.
    pub fn land(mut self, entry: Arc<Entry>) {
        self.landed = true;
        if let Some(slot) = self.flights.lock().remove(&self.key) {
            slot.send_replace(Some(entry));
        }
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if !self.landed {
            self.flights.lock().remove(&self.key);
        }
    }
}

/// Another request's computation of a key.
pub struct Waiter(watch::Receiver<Option<Arc<Entry>>>);

impl Waiter {
    /// Its answer, or `None` when that request ended without one.
    pub async fn answer(mut self) -> Option<Arc<Entry>> {
        let answer = self.0.wait_for(Option::is_some).await.ok()?;
        answer.clone()
    }
}
