//! Triton's model repository extension, shared between the repository watcher and the HTTP
//! handlers: the index of every version the repository holds and its state, and the
//! operator's explicit unload (a model held out of service until loaded again) and load.
//!
//! The watcher is the only one that loads and unloads; a handler asks it for a pass now and
//! waits for that pass to end, so an answer to `load` or `unload` means it has happened.

use std::collections::BTreeSet;
use std::sync::Mutex;

use serde::Serialize;
use tokio::sync::{mpsc, oneshot};

use crate::error::ApiError;

/// Requests waiting for a pass (one pass answers all that wait when it begins); beyond
/// them a request is answered 503.
const PENDING_PASSES: usize = 64;

/// One version in the index, as Triton reports it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct IndexEntry {
    pub name: String,
    /// A number here, a string on the wire (as Triton sends it).
    #[serde(serialize_with = "as_string")]
    pub version: u64,
    pub state: VersionState,
    /// Why a version is not serving (empty when it is).
    pub reason: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum VersionState {
    Ready,
    Unavailable,
}

fn as_string<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(v)
}

/// Asks the watcher for a pass; the sender is answered when it has ended.
pub type PassRequest = oneshot::Sender<()>;

pub struct RepositoryControl {
    /// Models the operator unloaded: the watcher loads none of their versions until a
    /// `load` releases them.
    held: Mutex<BTreeSet<String>>,
    /// As the last pass left the repository.
    index: Mutex<Vec<IndexEntry>>,
    passes: mpsc::Sender<PassRequest>,
}

impl RepositoryControl {
    /// The control and the receiving end the watcher's loop serves.
    pub fn new() -> (RepositoryControl, mpsc::Receiver<PassRequest>) {
        let (passes, rx) = mpsc::channel(PENDING_PASSES);
        let control = RepositoryControl {
            held: Mutex::default(),
            index: Mutex::default(),
            passes,
        };
        (control, rx)
    }

    pub fn is_held(&self, model: &str) -> bool {
        self.lock_held().contains(model)
    }

    /// Holds `model` out of service from the next pass on.
    pub fn hold(&self, model: &str) {
        self.lock_held().insert(model.to_string());
    }

    /// Lets the next pass load `model` again.
    pub fn release(&self, model: &str) {
        self.lock_held().remove(model);
    }

    pub fn set_index(&self, entries: Vec<IndexEntry>) {
        *self.index.lock().unwrap_or_else(|p| p.into_inner()) = entries;
    }

    pub fn index(&self) -> Vec<IndexEntry> {
        self.index.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Has the watcher make a pass now and returns once it has ended (a pass already
    /// running finishes first).
    pub async fn pass_now(&self) -> Result<(), ApiError> {
        let (done, ended) = oneshot::channel();
        self.passes.try_send(done).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => ApiError::Unavailable(
                "the model repository is busy with earlier load and unload requests; retry".into(),
            ),
            mpsc::error::TrySendError::Closed(_) => {
                ApiError::Unavailable("the server is shutting down".into())
            }
        })?;
        ended
            .await
            .map_err(|_| ApiError::Unavailable("the server is shutting down".into()))
    }

    fn lock_held(&self) -> std::sync::MutexGuard<'_, BTreeSet<String>> {
        // A set of names stays consistent whatever a panicking holder was doing.
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// `first` and every request waiting behind it: all asked before the pass about to begin,
/// so that one pass answers them all.
pub fn with_waiting(
    first: PassRequest,
    requests: &mut mpsc::Receiver<PassRequest>,
) -> Vec<PassRequest> {
    let mut waiting = vec![first];
    while let Ok(more) = requests.try_recv() {
        waiting.push(more);
    }
    waiting
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn one_pass_answers_every_request_waiting_when_it_begins() {
        let (control, mut passes) = RepositoryControl::new();
        let control = std::sync::Arc::new(control);
        let asking: Vec<_> = (0..5)
            .map(|_| {
                let c = control.clone();
                tokio::spawn(async move { c.pass_now().await })
            })
            .collect();
        while control.passes.capacity() > PENDING_PASSES - 5 {
            tokio::task::yield_now().await;
        }
        let first = passes.recv().await.unwrap();
        let waiting = with_waiting(first, &mut passes);
        assert_eq!(waiting.len(), 5);
        for done in waiting {
            done.send(()).unwrap();
        }
        for a in asking {
            a.await.unwrap().unwrap();
        }
    }

    #[tokio::test]
    async fn a_pass_is_answered_when_the_watcher_ends_it() {
        let (control, mut passes) = RepositoryControl::new();
        let watcher = tokio::spawn(async move {
            let done = passes.recv().await.unwrap();
            done.send(()).unwrap();
        });
        control.pass_now().await.unwrap();
        watcher.await.unwrap();
        // With the watcher gone, asking again says so instead of waiting for ever.
        let err = control.pass_now().await.unwrap_err();
        assert!(err.to_string().contains("shutting down"), "{err}");
    }

    #[tokio::test]
    async fn too_many_waiting_passes_are_refused() {
        let (control, _passes) = RepositoryControl::new();
        let control = std::sync::Arc::new(control);
        let mut waiting = Vec::new();
        for _ in 0..PENDING_PASSES {
            let c = control.clone();
            waiting.push(tokio::spawn(async move { c.pass_now().await }));
        }
        tokio::task::yield_now().await;
        while control.passes.capacity() > 0 {
            tokio::task::yield_now().await;
        }
        let err = control.pass_now().await.unwrap_err();
        assert!(err.to_string().contains("busy"), "{err}");
        for w in waiting {
            w.abort();
        }
    }

    #[test]
    fn holds_are_per_model_and_released() {
        let (control, _passes) = RepositoryControl::new();
        control.hold("a");
        assert!(control.is_held("a") && !control.is_held("b"));
        control.release("a");
        assert!(!control.is_held("a"));
        let entry = IndexEntry {
            name: "a".into(),
            version: 1,
            state: VersionState::Unavailable,
            reason: "unloaded".into(),
        };
        control.set_index(vec![entry.clone()]);
        assert_eq!(control.index(), vec![entry.clone()]);
        assert_eq!(
            serde_json::to_value(&entry).unwrap()["version"],
            "1",
            "a string on the wire"
        );
        assert_eq!(
            serde_json::to_value(VersionState::Ready).unwrap(),
            "READY",
            "Triton's spelling"
        );
    }
}
