//! The queue of one model version, as a pure data structure: no time source, no channels.
//!
//! Requests are ranked by priority (1 first), then deadline (earliest first, none last),
//! then arrival. Expired requests come out through [`QueueState::expire`] so that a timer
//! can answer them before they take a batch slot.

use std::collections::{BTreeMap, BTreeSet};

use tokio::time::Instant;

use super::Pending;

/// Rank in the queue: smaller leaves first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Rank {
    priority: u32,
    /// `false` sorts first: requests with a deadline go before those without.
    no_deadline: bool,
    deadline: Option<Instant>,
    seq: u64,
}

/// A summary of the queue for the batching policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QueueView {
    pub requests: usize,
    pub rows: usize,
    /// Arrival of the request that has waited longest.
    pub oldest: Option<Instant>,
    /// The earliest deadline of any waiting request.
    pub earliest_deadline: Option<Instant>,
    /// Rows of the batch that [`QueueState::take_batch`] would form at the policy's largest
    /// size right now (requests are never split).
    pub head_rows: usize,
    /// Whether that batch holds as many outputs (a text model's texts) as a batch may: full,
    /// however few rows (token-units) it has.
    pub head_at_output_limit: bool,
}

impl QueueView {
    /// Whether the next batch can grow no further under a limit of `max_rows`: the queue
    /// holds that many rows, the next request does not fit, or the batch holds as many
    /// outputs as a batch may.
    pub fn head_is_full(&self, max_rows: usize) -> bool {
        self.rows >= max_rows || self.head_rows < self.rows || self.head_at_output_limit
    }
}

#[derive(Debug)]
pub struct QueueState {
    ranked: BTreeMap<Rank, Pending>,
    /// Arrival order (seq → rank), for the oldest request.
    arrivals: BTreeMap<u64, Rank>,
    /// Deadline order, for expiry.
    deadlines: BTreeSet<(Instant, Rank)>,
    rows: usize,
    /// Rows waiting per priority, for admission (rows ranked ahead of a newcomer).
    rows_by_priority: BTreeMap<u32, usize>,
    capacity: usize,
    max_batch_rows: usize,
    /// Output rows (a text model's sequences) a batch holds at most.
    max_batch_outputs: usize,
    next_seq: u64,
}

impl QueueState {
    /// A queue of at most `capacity` requests whose batches hold at most `max_batch_rows`.
    pub fn new(capacity: usize, max_batch_rows: usize) -> QueueState {
        QueueState {
            ranked: BTreeMap::new(),
            arrivals: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            rows: 0,
            rows_by_priority: BTreeMap::new(),
            capacity,
            max_batch_rows,
            max_batch_outputs: usize::MAX,
            next_seq: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.ranked.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ranked.is_empty()
    }

    #[cfg(test)]
    pub fn rows(&self) -> usize {
        self.rows
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn set_limits(&mut self, capacity: usize, max_batch_rows: usize) {
        self.capacity = capacity;
        self.max_batch_rows = max_batch_rows;
    }

    /// Bounds a batch's output rows too (a text model's sequences per batch).
    pub fn with_max_outputs(mut self, max_batch_outputs: usize) -> QueueState {
        self.set_max_outputs(max_batch_outputs);
        self
    }

    pub fn set_max_outputs(&mut self, max_batch_outputs: usize) {
        self.max_batch_outputs = max_batch_outputs.max(1);
    }

    /// Adds a request, or gives it back when the queue is full.
    pub fn push(&mut self, p: Pending) -> Result<(), Pending> {
        if self.ranked.len() >= self.capacity {
            return Err(p);
        }
        let rank = Rank {
            priority: p.priority,
            no_deadline: p.deadline.is_none(),
            deadline: p.deadline,
            seq: self.next_seq,
        };
        self.next_seq += 1;
        self.rows += p.rows;
        *self.rows_by_priority.entry(p.priority).or_default() += p.rows;
        self.arrivals.insert(rank.seq, rank);
        if let Some(d) = p.deadline {
            self.deadlines.insert((d, rank));
        }
        self.ranked.insert(rank, p);
        Ok(())
    }

    fn remove(&mut self, rank: Rank) -> Option<Pending> {
        let p = self.ranked.remove(&rank)?;
        self.arrivals.remove(&rank.seq);
        if let Some(d) = rank.deadline {
            self.deadlines.remove(&(d, rank));
        }
        self.rows -= p.rows;
        if let Some(n) = self.rows_by_priority.get_mut(&p.priority) {
            *n -= p.rows;
            if *n == 0 {
                self.rows_by_priority.remove(&p.priority);
            }
        }
        Some(p)
    }

    pub fn view(&self) -> QueueView {
        let (_, head_rows, head_outputs) = self.head(self.max_batch_rows);
        QueueView {
            requests: self.ranked.len(),
            rows: self.rows,
            oldest: self
                .arrivals
                .first_key_value()
                .and_then(|(_, r)| self.ranked.get(r))
                .map(|p| p.enqueued),
            earliest_deadline: self.deadlines.first().map(|(d, _)| *d),
            head_rows,
            head_at_output_limit: head_outputs >= self.max_batch_outputs,
        }
    }

    /// Rows waiting at `priority` or a more urgent one: what a newcomer of that priority
    /// waits behind.
    pub fn rows_ahead(&self, priority: u32) -> usize {
        self.rows_by_priority
            .range(..=priority)
            .map(|(_, n)| n)
            .sum()
    }

    /// The best-ranked requests that fit in `max_rows` (and the output limit) together,
    /// with their rows and outputs. A request larger than the room left ends the batch
    /// rather than being skipped, so it cannot starve; the first request is taken whatever
    /// its size, so one admitted before the limits were lowered still runs, alone.
    fn head(&self, max_rows: usize) -> (Vec<Rank>, usize, usize) {
        let (mut ranks, mut rows, mut outputs) = (Vec::new(), 0, 0);
        for (rank, p) in &self.ranked {
            let fits = rows + p.rows <= max_rows && outputs + p.outputs <= self.max_batch_outputs;
            if !fits && !ranks.is_empty() {
                break;
            }
            rows += p.rows;
            outputs += p.outputs;
            ranks.push(*rank);
        }
        (ranks, rows, outputs)
    }

    /// Removes the batch [`QueueView::head_rows`] describes (at `max_rows`).
    pub fn take_batch(&mut self, max_rows: usize) -> Vec<Pending> {
        let (take, _, _) = self.head(max_rows);
        take.into_iter().filter_map(|r| self.remove(r)).collect()
    }

    /// Removes every request whose deadline is at or before `now`.
    pub fn expire(&mut self, now: Instant) -> Vec<Pending> {
        let mut expired = Vec::new();
        while let Some(&(d, rank)) = self.deadlines.first() {
            if d > now {
                break;
            }
            if let Some(p) = self.remove(rank) {
                expired.push(p);
            }
        }
        expired
    }

    /// The next time [`QueueState::expire`] has work.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.deadlines.first().map(|(d, _)| *d)
    }

    /// Removes requests whose client has gone; they would cost compute for nobody.
    pub fn drop_abandoned(&mut self) -> usize {
        let gone: Vec<Rank> = self
            .ranked
            .iter()
            .filter(|(_, p)| p.reply.is_closed())
            .map(|(r, _)| *r)
            .collect();
        let n = gone.len();
        for r in gone {
            self.remove(r);
        }
        n
    }

    /// Removes everything (shutdown of a version with nothing left to serve it).
    pub fn drain(&mut self) -> Vec<Pending> {
        let ranks: Vec<Rank> = self.ranked.keys().copied().collect();
        ranks.into_iter().filter_map(|r| self.remove(r)).collect()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::oneshot;

    use super::*;
    use crate::batching::Reply;

    fn pending(
        rows: usize,
        priority: u32,
        enqueued: Instant,
        deadline: Option<Instant>,
    ) -> (Pending, oneshot::Receiver<Reply>) {
        let (tx, rx) = oneshot::channel();
        let p = Pending {
            input: crate::batching::Payload::Dense(vec![rows as f32; rows]),
            rows,
            outputs: rows,
            priority,
            enqueued,
            deadline,
            continues: false,
            reply: tx,
        };
        (p, rx)
    }

    #[test]
    fn ranks_by_priority_then_deadline_then_arrival() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let mut q = QueueState::new(10, 100);
        let mut keep = Vec::new();
        for (rows, prio, dl) in [
            (1, 2, None),
            (2, 1, None),
            (3, 1, Some(t + ms(50))),
            (4, 1, Some(t + ms(10))),
            (5, 2, Some(t + ms(1))),
        ] {
            let (p, rx) = pending(rows, prio, t, dl);
            keep.push(rx);
            q.push(p).unwrap();
        }
        assert_eq!(q.rows_ahead(1), 2 + 3 + 4);
        assert_eq!(q.rows_ahead(2), 15);
        let order: Vec<usize> = q.take_batch(100).iter().map(|p| p.rows).collect();
        assert_eq!(order, vec![4, 3, 2, 5, 1]);
        assert!(q.is_empty() && q.rows() == 0);
    }

    #[test]
    fn a_batch_with_as_many_texts_as_a_batch_holds_is_full_however_few_its_tokens() {
        let t = Instant::now();
        // Token-units allow 1,000; a batch holds 4 texts of 5 units each.
        let mut q = QueueState::new(100, 1000).with_max_outputs(4);
        let mut keep = Vec::new();
        for n in 1..=5 {
            let (mut p, rx) = pending(5, 1, t, None);
            p.outputs = 1;
            keep.push(rx);
            q.push(p).unwrap();
            let view = q.view();
            assert_eq!(view.head_at_output_limit, n >= 4, "{n} texts queued");
            assert_eq!(view.head_rows, 5 * n.min(4));
        }
        assert_eq!(q.take_batch(1000).len(), 4);
    }

    #[test]
    fn a_request_past_lowered_limits_still_runs_alone() {
        let t = Instant::now();
        let mut q = QueueState::new(10, 16);
        let mut keep = Vec::new();
        for rows in [12, 3] {
            let (p, rx) = pending(rows, 1, t, None);
            keep.push(rx);
            q.push(p).unwrap();
        }
        // The operator lowers the batch size to 8: the 12-row request was admitted already.
        let b: Vec<usize> = q.take_batch(8).iter().map(|p| p.rows).collect();
        assert_eq!(b, vec![12]);
        let b: Vec<usize> = q.take_batch(8).iter().map(|p| p.rows).collect();
        assert_eq!(b, vec![3]);
        // Likewise for texts: two queued, the limit lowered to one per batch.
        q.set_max_outputs(1);
        for rows in [2, 2] {
            let (p, rx) = pending(rows, 1, t, None);
            keep.push(rx);
            q.push(p).unwrap();
        }
        assert_eq!(q.take_batch(8).len(), 1);
        assert_eq!(q.take_batch(8).len(), 1);
    }

    #[test]
    fn batches_never_split_requests_and_do_not_skip_ahead() {
        let t = Instant::now();
        let mut q = QueueState::new(10, 8);
        let mut keep = Vec::new();
        for rows in [3, 4, 2, 1] {
            let (p, rx) = pending(rows, 1, t, None);
            keep.push(rx);
            q.push(p).unwrap();
        }
        assert_eq!(q.view().head_rows, 7);
        let b: Vec<usize> = q.take_batch(8).iter().map(|p| p.rows).collect();
        assert_eq!(b, vec![3, 4]);
        assert_eq!(q.rows(), 3);
    }

    #[test]
    fn capacity_bounds_the_queue() {
        let t = Instant::now();
        let mut q = QueueState::new(2, 8);
        let (a, _ra) = pending(1, 1, t, None);
        let (b, _rb) = pending(1, 1, t, None);
        let (c, _rc) = pending(1, 1, t, None);
        q.push(a).unwrap();
        q.push(b).unwrap();
        assert!(q.push(c).is_err());
        assert_eq!(q.len(), 2);
    }

    #[test]
    fn expiry_removes_exactly_the_overdue() {
        let t = Instant::now();
        let ms = Duration::from_millis;
        let mut q = QueueState::new(10, 8);
        let mut keep = Vec::new();
        for dl in [Some(t + ms(5)), None, Some(t + ms(1)), Some(t + ms(9))] {
            let (p, rx) = pending(1, 1, t, dl);
            keep.push(rx);
            q.push(p).unwrap();
        }
        assert_eq!(q.next_expiry(), Some(t + ms(1)));
        assert_eq!(q.expire(t + ms(5)).len(), 2);
        assert_eq!(q.len(), 2);
        assert_eq!(q.next_expiry(), Some(t + ms(9)));
        assert_eq!(q.view().earliest_deadline, Some(t + ms(9)));
    }

    #[test]
    fn abandoned_requests_are_dropped() {
        let t = Instant::now();
        let mut q = QueueState::new(10, 8);
        let (a, ra) = pending(1, 1, t, None);
        let (b, _rb) = pending(2, 1, t, None);
        q.push(a).unwrap();
        q.push(b).unwrap();
        drop(ra);
        assert_eq!(q.drop_abandoned(), 1);
        assert_eq!(q.rows(), 2);
    }

    #[test]
    fn the_oldest_is_tracked_across_priorities() {
        let t = Instant::now();
        let mut q = QueueState::new(10, 8);
        let (a, _ra) = pending(1, 3, t, None);
        let (b, _rb) = pending(1, 1, t + Duration::from_millis(4), None);
        q.push(a).unwrap();
        q.push(b).unwrap();
        assert_eq!(q.view().oldest, Some(t));
        q.take_batch(1);
        assert_eq!(q.view().oldest, Some(t));
        q.take_batch(1);
        assert_eq!(q.view().oldest, None);
    }
}
