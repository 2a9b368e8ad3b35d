//! Request latencies as the handlers see them, for the policy's feedback loop. A worker
//! knows when its batch finished; the client waits on top of that until its handler is
//! polled again and the response is written, which on busy cores is milliseconds the
//! worker never sees. The handler, answering, records here the latency from the
//! request's arrival and the part of it after the batch finished; the batcher drains them
//! whenever it wakes.

use std::sync::Mutex;
use std::time::Duration;

/// Samples beyond this between two drains are dropped: the batcher drains at every wake,
/// so only a stalled batcher reaches it, and the memory stays bounded then too.
const CAPACITY: usize = 8192;

/// One answered request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Answered {
    /// From arrival to the response being handed to the connection.
    pub latency: Duration,
    /// The part of it after the batch finished: waking the handler, encoding, writing.
    pub after_compute: Duration,
}

#[derive(Debug, Default)]
pub struct ResponseLatencies {
    samples: Mutex<Vec<Answered>>,
}

impl ResponseLatencies {
    pub fn record(&self, answered: Answered) {
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        if samples.len() < CAPACITY {
            samples.push(answered);
        }
    }

    /// Moves every sample recorded since the last call into `out`.
    pub fn drain_into(&self, out: &mut Vec<Answered>) {
        let mut samples = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        out.append(&mut samples);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn drains_what_was_recorded_and_stays_bounded() {
        let inbox = ResponseLatencies::default();
        let mut out = Vec::new();
        inbox.drain_into(&mut out);
        assert!(out.is_empty());
        let answered = |ms| Answered {
            latency: Duration::from_millis(ms),
            after_compute: Duration::from_micros(ms),
        };
        for ms in [3, 1, 2] {
            inbox.record(answered(ms));
        }
        inbox.drain_into(&mut out);
        assert_eq!(out, [3, 1, 2].map(answered));
        out.clear();
        inbox.drain_into(&mut out);
        assert!(out.is_empty(), "a drain empties it");
        for _ in 0..CAPACITY + 10 {
            inbox.record(answered(1));
        }
        inbox.drain_into(&mut out);
        assert_eq!(out.len(), CAPACITY);
    }
}
