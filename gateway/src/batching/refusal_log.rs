//! The log line of a refusal: what the decision saw, at most once a second per model (under
//! overload refusals come by the thousand a second), with how many were not logged since.

use std::time::Duration;

use tokio::time::Instant;

use super::policy::ShedView;

const EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub struct RefusalLog {
    last: Option<Instant>,
    unlogged: u64,
}

impl RefusalLog {
    /// Logs `seen` if a second has passed since the last line; counts it otherwise.
    pub fn refused(&mut self, model: &str, seen: &ShedView, now: Instant) {
        if self
            .last
            .is_some_and(|t| now.saturating_duration_since(t) < EVERY)
        {
            self.unlogged += 1;
            return;
        }
        self.last = Some(now);
        // Taken outside the macro: its fields are evaluated only when the line is enabled.
        let unlogged = std::mem::take(&mut self.unlogged);
        let ms = |d: Duration| (d.as_secs_f64() * 1e4).round() / 10.0;
        tracing::info!(
            model,
            waited_ms = ms(seen.waited),
            ahead = seen.ahead,
            rows = seen.rows,
            busy_ms = ms(seen.busy),
            finish_ms = ms(seen.finish),
            deadline_ms = ms(seen.deadline),
            horizon_ms = ms(seen.horizon),
            full_batch_ms = ms(seen.full_batch),
            spread = (seen.spread * 1e3).round() / 1e3,
            unlogged_since = unlogged,
            "request refused: predicted to finish past its deadline"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_line_a_second_and_the_rest_counted() {
        let mut log = RefusalLog::default();
        let t0 = Instant::now();
        let seen = ShedView::default();
        for i in 0..10 {
            log.refused("m", &seen, t0 + Duration::from_millis(i * 50));
        }
        assert_eq!(log.unlogged, 9);
        log.refused("m", &seen, t0 + Duration::from_millis(1000));
        assert_eq!(log.unlogged, 0, "the count goes out with the next line");
    }
}
