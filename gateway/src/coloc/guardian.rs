//! The guardian: a small process that continues (SIGCONT) the trainers this gateway stopped
//! if the gateway dies without continuing them itself (SIGKILL, a crash, the OOM killer). A
//! stopped process cannot resume itself, and the gateway that stopped it is the only one
//! that would: without the guardian a training job would stay frozen until someone noticed.
//!
//! The gateway starts it (its own executable again, with [`ARG`]) and writes to its
//! stdin `stop PID START` before each SIGSTOP (START: the process's start time from /proc,
//! so that a pid reused after the trainer died is never signalled) and `cont PID` after each
//! SIGCONT. When its stdin ends — the gateway has exited, however it exited — the guardian
//! continues every process still marked stopped and exits. It ignores SIGINT, SIGTERM and
//! SIGHUP and has its own process group, so a signal meant for the gateway's group does not
//! take it first; the end of its stdin is the one thing it waits for. A guardian that dies
//! anyway is replaced within a coordinator tick and told what is stopped.

use std::collections::BTreeMap;
use std::io::{BufRead, Read, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The argument that makes `tandem` the guardian (`tandem __coloc-guardian`).
pub const ARG: &str = "__coloc-guardian";

/// Stopped processes the guardian tracks at most; the gateway holds at most `max_trainers`.
const MOST_TRACKED: usize = 4096;

static PROGRAM: OnceLock<PathBuf> = OnceLock::new();

/// Names the executable that runs [`main`] when given [`ARG`]: the binary calls this (with
/// its own path) before serving. A gateway in a program that did not has no guardian.
pub fn enable(program: PathBuf) {
    let _ = PROGRAM.set(program);
}

/// The gateway's end of the guardian. It keeps its own record of what is stopped, so that
/// a guardian that dies (killed by hand, by the OOM killer) is replaced by one told the
/// same (`check`, every coordinator tick, and any failed write).
pub struct Guardian {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// False where no guardian can run (no program named, or in tests).
    enabled: bool,
    child: Option<Child>,
    /// pid → start time of every process stopped and not yet continued.
    stopped: BTreeMap<i32, u64>,
    /// When a guardian was last started: one that keeps dying is replaced once a second.
    last_spawn: Option<Instant>,
    /// A failure to start one was logged, and not since followed by a success.
    warned: bool,
}

impl Guardian {
    /// Starts the guardian process; one that does nothing where none can run.
    pub fn start() -> Guardian {
        let mut inner = Inner {
            enabled: PROGRAM.get().is_some(),
            ..Inner::default()
        };
        inner.respawn();
        Guardian {
            inner: Mutex::new(inner),
        }
    }

    pub fn disabled() -> Guardian {
        Guardian {
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Call before stopping `pid`.
    pub fn stopping(&self, pid: i32) {
        if let Some(start) = start_time(pid) {
            let mut inner = self.lock();
            inner.stopped.insert(pid, start);
            inner.send(&format!("stop {pid} {start}\n"));
        }
    }

    /// Call after continuing `pid` (or failing to stop it).
    pub fn continued(&self, pid: i32) {
        let mut inner = self.lock();
        inner.stopped.remove(&pid);
        inner.send(&format!("cont {pid}\n"));
    }

    /// Replaces a guardian that has exited, telling the new one what is stopped.
    pub fn check(&self) {
        let mut inner = self.lock();
        if let Some(child) = inner.child.as_mut()
            && !matches!(child.try_wait(), Ok(None))
        {
            tracing::warn!(
                pid = child.id(),
                "the guardian process exited; starting another"
            );
            inner.child = None;
        }
        if inner.child.is_none() {
            inner.respawn();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Inner {
    fn send(&mut self, line: &str) {
        // A few bytes into a pipe the guardian keeps reading: this does not block.
        let written = self
            .child
            .as_mut()
            .and_then(|c| c.stdin.as_mut())
            .is_some_and(|pipe| pipe.write_all(line.as_bytes()).is_ok());
        if !written {
            if let Some(mut old) = self.child.take() {
                let _ = old.kill();
                let _ = old.wait();
            }
            // The new one is told everything, this line's change included (or, if one was
            // started less than a second ago, the next tick's is).
            self.respawn();
        }
    }

    /// Starts a guardian and tells it every process now stopped.
    fn respawn(&mut self) {
        let Some(program) = PROGRAM.get().filter(|_| self.enabled) else {
            return;
        };
        let now = Instant::now();
        if self
            .last_spawn
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            return;
        }
        self.last_spawn = Some(now);
        use std::os::unix::process::CommandExt;
        let spawned = Command::new(program)
            .arg(ARG)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn();
        let mut child = match spawned {
            Ok(child) => child,
            Err(e) => {
                if !self.warned {
                    self.warned = true;
                    tracing::warn!(error = %e, "no guardian process: a trainer stopped when the gateway dies stays stopped");
                }
                return;
            }
        };
        self.warned = false;
        tracing::debug!(pid = child.id(), "guardian started");
        let state: String = self
            .stopped
            .iter()
            .map(|(pid, start)| format!("stop {pid} {start}\n"))
            .collect();
        if let Some(pipe) = child.stdin.as_mut()
            && pipe.write_all(state.as_bytes()).is_err()
        {
            tracing::warn!("the new guardian process did not take what is stopped");
        }
        self.child = Some(child);
    }
}

/// The start time of a process (clock ticks after boot): field 22 of `/proc/PID/stat`,
/// counted after the command name, which may itself hold spaces and parentheses.
pub fn start_time(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = &stat[stat.rfind(')')? + 1..];
    // Fields from the third (state) on; the start time is the 22nd field overall.
    after_name.split_whitespace().nth(19)?.parse().ok()
}

/// What the guardian would continue: pid → start time.
#[derive(Debug, Default, PartialEq)]
struct Stopped(BTreeMap<i32, u64>);

impl Stopped {
    /// Applies one line from the gateway; a line it cannot read changes nothing.
    fn apply(&mut self, line: &str) {
        let words: Vec<&str> = line.split_whitespace().collect();
        let pid = words
            .get(1)
            .and_then(|p| p.parse::<i32>().ok())
            .filter(|&p| p > 0);
        match (words.as_slice(), pid) {
            (["stop", _, start], Some(pid))
                if self.0.len() < MOST_TRACKED || self.0.contains_key(&pid) =>
            {
                if let Ok(start) = start.parse::<u64>() {
                    self.0.insert(pid, start);
                }
            }
            (["cont", _], Some(pid)) => {
                self.0.remove(&pid);
            }
            _ => {}
        }
    }

    /// Continues every process still marked stopped that is the one that was stopped.
    fn continue_all(&self) -> Vec<i32> {
        let mut continued = Vec::new();
        for (&pid, &start) in &self.0 {
            if start_time(pid) == Some(start) {
                // SAFETY: kill(2); the pid is the process the gateway stopped (same start time).
                if unsafe { libc::kill(pid, libc::SIGCONT) } == 0 {
                    continued.push(pid);
                }
            }
        }
        continued
    }
}

/// The guardian process: reads the gateway's lines until its stdin ends, then continues
/// what is still stopped.
pub fn main() {
    // Named apart from the gateway in ps, top and /proc/PID/comm (at most 15 bytes).
    // SAFETY: PR_SET_NAME reads a NUL-terminated string of at most 16 bytes.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"tandem-guardian".as_ptr()) };
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: setting a signal's disposition to ignore has no preconditions.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
    let mut stopped = Stopped::default();
    let mut input = std::io::stdin().lock();
    let mut line = String::new();
    loop {
        line.clear();
        // Lines are short; one longer than this is not the gateway's and is dropped whole.
        match (&mut input).take(128).read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) if !line.ends_with('\n') => {
                if input.skip_until(b'\n').unwrap_or(0) == 0 {
                    break;
                }
            }
            Ok(_) => stopped.apply(&line),
        }
    }
    let continued = stopped.continue_all();
    if !continued.is_empty() {
        eprintln!(
            "tandem guardian: the gateway exited holding trainers stopped; continued (SIGCONT) pids {continued:?}"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracks_what_the_gateway_stopped_and_has_not_continued() {
        let mut s = Stopped::default();
        s.apply("stop 10 100\n");
        s.apply("stop 11 200\n");
        s.apply("cont 10\n");
        s.apply("stop 12\n"); // no start time: not trusted
        s.apply("stop -1 5\n");
        s.apply("stop x 5\n");
        s.apply("cont 11 extra\n");
        s.apply("garbage\n");
        assert_eq!(s, Stopped(BTreeMap::from([(11, 200)])));
    }

    #[test]
    fn the_start_time_of_this_process_is_read_and_a_wrong_one_is_not_continued() {
        let me = std::process::id() as i32;
        let start = start_time(me).expect("a start time");
        assert!(start > 0);
        assert_eq!(start_time(me), Some(start));
        // A process with this pid but another start time is not the one stopped: nothing
        // is signalled (were it signalled, SIGCONT to a running process would be harmless,
        // but continue_all would report it).
        let s = Stopped(BTreeMap::from([(me, start + 1)]));
        assert!(s.continue_all().is_empty());
        let s = Stopped(BTreeMap::from([(me, start)]));
        assert_eq!(s.continue_all(), vec![me]);
    }
}
