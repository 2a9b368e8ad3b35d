//! When a request passed each point of its way through the core, noted into a task-local
//! record only while traces are exported (the protocol's handler makes the spans from it
//! once the request is answered).

use std::cell::RefCell;
use std::time::{Duration, Instant};

/// When a request passed each point, as far as it got.
#[derive(Default)]
pub struct Phases {
    pub model: Option<String>,
    /// The arrival its handler counted from, and when it was queued.
    pub queued: Option<(Instant, Instant)>,
    /// When its answer came back from the batch, how long it queued (from arrival) and
    /// how long the forward pass took.
    pub answered: Option<(Instant, Duration, Duration)>,
}

tokio::task_local! {
    static PHASES: RefCell<Phases>;
}

/// Runs `handler` with a record of its phases, if traces are exported.
pub async fn recording<F: std::future::Future>(on: bool, handler: F) -> (F::Output, Phases) {
    if !on {
        return (handler.await, Phases::default());
    }
    let (output, phases) = PHASES
        .scope(RefCell::new(Phases::default()), async {
            let output = handler.await;
            (output, PHASES.with(|p| p.take()))
        })
        .await;
    (output, phases)
}

fn note(f: impl FnOnce(&mut Phases)) {
    let _ = PHASES.try_with(|p| f(&mut p.borrow_mut()));
}

/// The request's model, once resolved.
pub fn model(name: &str) {
    note(|p| p.model = Some(name.to_string()));
}

/// The request goes to its queue now; its handler counts from `arrival`.
pub fn queued(arrival: Instant) {
    note(|p| p.queued = Some((arrival, Instant::now())));
}

/// The request's answer is back from its batch.
pub fn answered(queue_time: Duration, compute_time: Duration) {
    note(|p| p.answered = Some((Instant::now(), queue_time, compute_time)));
}
