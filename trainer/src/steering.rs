//! How the reference trainer obeys the gateway's directives at a step boundary: pause
//! (report, wait, and hold no more memory than allowed), streams (threads on a CPU, placed
//! on the last cores; one stream on a GPU, which is all it uses and all it acks), memory
//! (the micro-batch that fits, its scratch freed down to it before the ack) and duty cycle
//! (idle after each step). Every ack says what the trainer uses and holds once obeyed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use models::train::{StepOptions, Train};

use crate::affinity;
use crate::client::Coloc;
use crate::protocol::{Ack, Directive, Report};

/// What a step may use, as the directives in force set it.
pub struct Steering {
    pub opts: StepOptions,
    /// Share of wall time to compute: after a step of `t`, idle `t · (1 - duty) / duty`.
    pub duty: f64,
    /// The last directive obeyed, in the client's numbering.
    applied: u64,
    /// Unconstrained: the batch and the threads.
    batch: usize,
    threads: usize,
    /// A GPU trainer uses one stream whatever it is allowed.
    one_stream: bool,
    /// A managed CPU trainer's threads, placed for `pinned` streams on the last of `cores`.
    cores: Option<Vec<usize>>,
    pinned: usize,
}

/// What obeying reads and changes besides the directive: the trainer, its thread pool,
/// and the counts for the summary.
pub struct Obeying<'a> {
    pub trainer: &'a mut dyn Train,
    pub pool: &'a rayon::ThreadPool,
    pub stop: &'a AtomicBool,
    pub applied_count: &'a mut u64,
    pub paused_seconds: &'a mut f64,
}

/// What a paused trainer reports every heartbeat.
#[derive(Clone, Copy)]
pub struct Standing {
    pub step: u64,
    pub loss: f64,
}

impl Steering {
    pub fn new(batch: usize, threads: usize, one_stream: bool, cores: Option<Vec<usize>>) -> Self {
        Steering {
            opts: StepOptions {
                threads: if one_stream { 1 } else { threads },
                micro_batch: batch,
            },
            duty: 1.0,
            applied: 0,
            batch,
            threads,
            one_stream,
            cores,
            pinned: threads,
        }
    }

    /// The last directive obeyed.
    pub fn applied(&self) -> u64 {
        self.applied
    }

    /// Obeys the directive in force: waits out a pause (true if it paused), then applies
    /// a directive not yet obeyed and acks it.
    pub fn obey(
        &mut self,
        c: &Coloc,
        o: &mut Obeying<'_>,
        standing: Standing,
    ) -> Result<bool, String> {
        let paused = c.directive().pause;
        if paused {
            self.wait_while_paused(c, o, standing)?;
        }
        let d = c.directive();
        if d.seq > self.applied {
            let ack = self.apply(&d, o)?;
            let _ = c.ack(ack);
        }
        Ok(paused)
    }

    /// Paused: acks every pause directive (with what it still holds, its scratch shrunk to
    /// the pause's memory limit) and reports zero throughput every heartbeat until told to
    /// resume, the gateway goes, or the run stops.
    fn wait_while_paused(
        &mut self,
        c: &Coloc,
        o: &mut Obeying<'_>,
        standing: Standing,
    ) -> Result<(), String> {
        let started = Instant::now();
        let mut d = c.directive();
        while d.pause && c.connected() && !o.stop.load(Ordering::Relaxed) {
            if d.seq > self.applied {
                self.note_applied(&d, o);
                let memory_bytes = self.fit_memory(&d, o.trainer)?;
                let _ = c.ack(Ack {
                    seq: d.seq,
                    streams: 0,
                    memory_bytes,
                });
            }
            let _ = c.report(Report {
                step: standing.step,
                samples_per_second: 0.0,
                loss: standing.loss,
                accuracy: None,
            });
            d = c.wait_for_change(d.seq, c.heartbeat);
        }
        *o.paused_seconds += started.elapsed().as_secs_f64();
        Ok(())
    }

    fn note_applied(&mut self, d: &Directive, o: &mut Obeying<'_>) {
        self.applied = d.seq;
        *o.applied_count += 1;
    }

    /// Applies a running directive; returns its ack.
    fn apply(&mut self, d: &Directive, o: &mut Obeying<'_>) -> Result<Ack, String> {
        self.note_applied(d, o);
        self.opts.threads = if self.one_stream {
            1
        } else {
            (d.max_streams as usize).clamp(1, self.threads)
        };
        self.place_threads(o.pool);
        let memory_bytes = self.fit_memory(d, o.trainer)?;
        self.duty = d.duty_cycle.clamp(0.01, 1.0);
        Ok(Ack {
            seq: d.seq,
            streams: self.opts.threads as u32,
            memory_bytes,
        })
    }

    /// The micro-batch that fits the directive's memory limit, with the scratch sized to it
    /// now (memory beyond it given back); returns what the trainer holds.
    fn fit_memory(&mut self, d: &Directive, trainer: &mut dyn Train) -> Result<u64, String> {
        let rows = trainer.rows_within(d.memory_limit_bytes).min(self.batch);
        self.opts.micro_batch = rows;
        trainer.reserve_rows(rows).map_err(|e| e.to_string())?;
        Ok(trainer.resident_bytes() as u64)
    }

    /// A managed CPU trainer told to use fewer threads than cores keeps them on the last
    /// cores (see `affinity`).
    fn place_threads(&mut self, pool: &rayon::ThreadPool) {
        let Some(all) = &self.cores else { return };
        if self.opts.threads == self.pinned {
            return;
        }
        self.pinned = self.opts.threads;
        let set = affinity::cores_for_streams(all, self.pinned);
        if let Err(e) = pool
            .broadcast(|_| affinity::pin_this_thread(set))
            .into_iter()
            .collect::<std::io::Result<Vec<()>>>()
        {
            tracing::warn!(error = %e, "cannot place the trainer's threads");
        }
    }

    /// After a step that took `took`: idles for the rest of the duty cycle. A new directive
    /// cuts the idle short: a pause must be acknowledged within its deadline, which a long
    /// idle after a long step would overrun.
    pub fn idle_after(&self, took: Duration, coloc: Option<&Coloc>) {
        if self.duty >= 1.0 {
            return;
        }
        let idle = took.mul_f64((1.0 - self.duty) / self.duty);
        match coloc {
            Some(c) => {
                c.wait_for_change(self.applied, idle);
            }
            None => std::thread::sleep(idle),
        }
    }
}
