//! The soak's faults, each on its own thread and schedule: new versions of the model
//! written into the repository (now and then a corrupt one) with the old ones deleted; a
//! co-located trainer killed with SIGKILL and started again; the config file rewritten and
//! reloaded with SIGHUP (now and then an invalid one, which the server must reject and
//! keep running on the last good one).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kernels::DType;
use models::Checkpoint;
use models::rng::SplitMix64;
use serde::Serialize;

use super::{Stop, metrics_value, scrape_blocking};
use crate::serve_process::tandem;

/// The config file of a server the soak started, in the versions SIGHUP takes it through.
pub struct ConfigFile {
    pub path: PathBuf,
    pub repository: PathBuf,
    pub socket: PathBuf,
    pub device: String,
    pub budget_ms: f64,
}

/// Which version of the config file to write.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Variant {
    /// Two valid files that differ in settings a reload applies at once.
    A,
    B,
    /// A file the server must refuse (`keep_versions = 0`), keeping the running config.
    Invalid,
}

impl ConfigFile {
    /// The server's slow-client limits in every variant: tighter than the defaults, so
    /// that the slow clients go through more connections in a run.
    pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);
    pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);

    fn text(&self, variant: Variant) -> String {
        let (keep_versions, request_timeout_ms) = match variant {
            Variant::A => (2, 60_000),
            Variant::B => (3, 45_000),
            Variant::Invalid => (0, 60_000),
        };
        format!(
            "model_repository = \"{}\"\nrepository_poll_ms = 500\nkeep_versions = {keep_versions}\n\
             device = \"{}\"\n[defaults]\np99_ms = {}\n[limits]\nrequest_timeout_ms = {request_timeout_ms}\n\
             header_read_timeout_ms = {}\nbody_read_timeout_ms = {}\n[coloc]\nsocket = \"{}\"\n",
            self.repository.display(),
            self.device,
            self.budget_ms,
            Self::HEADER_TIMEOUT.as_millis(),
            Self::BODY_TIMEOUT.as_millis(),
            self.socket.display(),
        )
    }

    /// Replaces the file whole, so that a reload never reads half of one.
    pub fn write(&self, variant: Variant) -> std::io::Result<()> {
        models::checkpoint::write_atomic(&self.path, self.text(variant).as_bytes())
    }
}

/// What the faults act on, and how often.
pub struct Plan {
    pub addr: SocketAddr,
    /// The server's process: SIGHUP goes there.
    pub pid: Option<u32>,
    /// `REPOSITORY/MODEL`: new versions go here.
    pub model_dir: Option<PathBuf>,
    /// Versions the soak wrote before the run (and so may delete).
    pub written: Vec<u64>,
    pub dims: Vec<usize>,
    pub swap_every: f64,
    pub keep_versions: usize,
    pub corrupt_every: u64,
    pub socket: Option<PathBuf>,
    pub device: String,
    pub trainer_kill_every: f64,
    /// Rewritten before each SIGHUP; `None` reloads the server's own file unchanged.
    pub config: Option<ConfigFile>,
    pub sighup_every: f64,
    pub seed: u64,
}

/// What the faults did, and what the server did wrong in answer.
#[derive(Debug, Default, Serialize)]
pub struct FaultReport {
    pub versions_written: u64,
    pub corrupt_versions_written: u64,
    pub versions_deleted: u64,
    pub newest_version: u64,
    pub trainers_started: u64,
    /// Trainers the gateway counted as connected within their life.
    pub trainers_joined: u64,
    pub trainers_killed: u64,
    /// Killed trainers the gateway stopped counting as connected within `DEPARTURE`.
    pub trainer_departures_seen: u64,
    pub reloads_sent: u64,
    pub invalid_reloads_sent: u64,
    /// Failures of the soak itself (a file it could not write, a process it could not
    /// start): the run did not test what it should have.
    pub errors: Vec<String>,
    pub violations: Vec<String>,
}

/// How long the gateway may take to notice that a killed trainer's connection closed.
const DEPARTURE: Duration = Duration::from_secs(10);

/// The fault threads of a run.
pub struct Running {
    report: Arc<Mutex<FaultReport>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Running {
    /// Waits for the threads (which end soon after `stop`) and returns what they did.
    pub fn join(self) -> FaultReport {
        for t in self.threads {
            if t.join().is_err() {
                let mut r = self.report.lock().expect("report");
                r.errors.push("a fault thread panicked".into());
            }
        }
        std::mem::take(&mut *self.report.lock().expect("report"))
    }
}

pub fn start(plan: Plan, stop: Stop) -> Running {
    let plan = Arc::new(plan);
    let report = Arc::new(Mutex::new(FaultReport::default()));
    let faults: [fn(&Plan, &Stop, &Mutex<FaultReport>); 3] = [versions, trainer, reloads];
    let threads = faults
        .into_iter()
        .map(|fault| {
            let (plan, stop, report) = (plan.clone(), stop.clone(), report.clone());
            std::thread::spawn(move || fault(&plan, &stop, &report))
        })
        .collect();
    Running { report, threads }
}

/// A new version every `swap_every` seconds; every `corrupt_every`th is a truncated file.
/// Of the versions the soak wrote, the newest `keep_versions` valid ones (and any newer
/// corrupt ones) stay on disk, so that the model always has a version to serve.
fn versions(plan: &Plan, stop: &Stop, report: &Mutex<FaultReport>) {
    let Some(dir) = &plan.model_dir else {
        return;
    };
    if plan.swap_every <= 0.0 {
        return;
    }
    let mut written: BTreeMap<u64, bool> = plan.written.iter().map(|v| (*v, false)).collect();
    let mut next = newest_version(dir).map_or(1, |v| v + 1);
    while stop.sleep(Duration::from_secs_f64(plan.swap_every)) {
        let corrupt = plan.corrupt_every > 0 && next.is_multiple_of(plan.corrupt_every);
        let written_ok = write_version(dir, next, &plan.dims, plan.seed, corrupt);
        let mut r = report.lock().expect("report");
        match written_ok {
            Ok(()) => {
                r.versions_written += 1;
                r.corrupt_versions_written += u64::from(corrupt);
                r.newest_version = next;
                written.insert(next, corrupt);
            }
            Err(e) => r.errors.push(format!("writing version {next}: {e}")),
        }
        for old in to_delete(&written, plan.keep_versions) {
            match std::fs::remove_dir_all(dir.join(old.to_string())) {
                Ok(()) => r.versions_deleted += 1,
                Err(e) => r.errors.push(format!("deleting version {old}: {e}")),
            }
            written.remove(&old);
        }
        next += 1;
    }
}

/// The versions (of `written`, version → corrupt) older than the newest `keep` valid ones.
fn to_delete(written: &BTreeMap<u64, bool>, keep: usize) -> Vec<u64> {
    let cutoff = written
        .iter()
        .rev()
        .filter(|(_, corrupt)| !**corrupt)
        .nth(keep.max(1) - 1)
        .map(|(v, _)| *v);
    match cutoff {
        Some(cutoff) => written.range(..cutoff).map(|(v, _)| *v).collect(),
        None => Vec::new(),
    }
}

/// The highest plain decimal folder name in `dir`.
fn newest_version(dir: &Path) -> Option<u64> {
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u64>().ok())
        .max()
}

/// `DIR/VERSION/model.safetensors`: a random MLP of `dims`, or its first half only.
pub fn write_version(
    dir: &Path,
    version: u64,
    dims: &[usize],
    seed: u64,
    corrupt: bool,
) -> std::io::Result<()> {
    let path = dir.join(version.to_string()).join("model.safetensors");
    let ckpt = Checkpoint::random(dims, DType::F32, seed.wrapping_mul(1_000_003) + version);
    if corrupt {
        let bytes = ckpt.to_bytes();
        models::checkpoint::write_atomic(&path, &bytes[..bytes.len() / 2])
    } else {
        ckpt.write_atomic(&path)
    }
}

/// A managed trainer, killed with SIGKILL after a life of `trainer_kill_every` seconds
/// (± 25%, seeded) and started again at once. Each must join the gateway within its life,
/// and the gateway must count it gone within `DEPARTURE` of its death.
fn trainer(plan: &Plan, stop: &Stop, report: &Mutex<FaultReport>) {
    let Some(socket) = &plan.socket else {
        return;
    };
    if plan.trainer_kill_every <= 0.0 {
        return;
    }
    let mut rng = SplitMix64::new(plan.seed ^ 0x7472_6169_6e65_7200);
    for n in 1.. {
        if stop.is_set() {
            return;
        }
        let mut child = match spawn_trainer(plan, socket, n) {
            Ok(child) => child,
            Err(e) => {
                report.lock().expect("report").errors.push(e.to_string());
                return;
            }
        };
        report.lock().expect("report").trainers_started += 1;
        let life = Duration::from_secs_f64(plan.trainer_kill_every * (0.75 + 0.5 * rng.next_f64()));
        let born = Instant::now();
        let joined = poll_connected(plan.addr, life, Some(stop), |c| c >= 1.0);
        let lived = stop.sleep(life.saturating_sub(born.elapsed()));
        let _ = child.kill();
        let _ = child.wait();
        let left = poll_connected(plan.addr, DEPARTURE, None, |c| c == 0.0);
        let mut r = report.lock().expect("report");
        r.trainers_killed += 1;
        r.trainers_joined += u64::from(joined);
        r.trainer_departures_seen += u64::from(left);
        if !joined && lived {
            r.violations
                .push(format!("trainer {n} did not join within {life:?}"));
        }
        if !left {
            r.violations.push(format!(
                "trainer {n} still counted connected {DEPARTURE:?} after SIGKILL"
            ));
        }
    }
}

fn spawn_trainer(plan: &Plan, socket: &Path, n: u64) -> anyhow::Result<Child> {
    let child = Command::new(tandem())
        .args([
            "train",
            "--data",
            "synthetic",
            "--synthetic-dims",
            "64,64,10",
        ])
        .args(["--device", &plan.device, "--threads", "1", "--batch", "32"])
        .args(["--seconds", "1e9", "--checkpoint-every", "3600"])
        .args(["--name", &format!("soak-trainer-{n}")])
        .arg("--coloc-socket")
        .arg(socket)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    Ok(child)
}

/// Polls `tandem_trainers_connected` until `holds` says yes (true) or `within` has passed
/// (or `stop`, if given, is set) (false).
fn poll_connected(
    addr: SocketAddr,
    within: Duration,
    stop: Option<&Stop>,
    holds: impl Fn(f64) -> bool,
) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline && !stop.is_some_and(Stop::is_set) {
        let connected = scrape_blocking(addr)
            .ok()
            .and_then(|text| metrics_value(&text, "tandem_trainers_connected", None));
        if connected.is_some_and(&holds) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    false
}

/// SIGHUP every `sighup_every` seconds, the config file rewritten first (A, B, A, invalid,
/// B, A, B, invalid, ...); left valid at the end.
fn reloads(plan: &Plan, stop: &Stop, report: &Mutex<FaultReport>) {
    let Some(pid) = plan.pid else {
        return;
    };
    if plan.sighup_every <= 0.0 {
        return;
    }
    for i in 0u64.. {
        if !stop.sleep(Duration::from_secs_f64(plan.sighup_every)) {
            break;
        }
        let variant = match i % 4 {
            3 => Variant::Invalid,
            k if (k + i / 4) % 2 == 0 => Variant::A,
            _ => Variant::B,
        };
        let mut r = report.lock().expect("report");
        if let Some(config) = &plan.config {
            if let Err(e) = config.write(variant) {
                r.errors.push(format!("writing the config file: {e}"));
                continue;
            }
            r.invalid_reloads_sent += u64::from(variant == Variant::Invalid);
        }
        // SAFETY: kill(2) has no memory-safety preconditions; `pid` is the server's.
        if unsafe { libc::kill(pid as i32, libc::SIGHUP) } == 0 {
            r.reloads_sent += 1;
        } else {
            r.errors.push(format!(
                "SIGHUP to {pid}: {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    if let Some(config) = &plan.config
        && let Err(e) = config.write(Variant::A)
    {
        let mut r = report.lock().expect("report");
        r.errors.push(format!("writing the config file: {e}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deleting_keeps_the_newest_valid_versions_and_anything_newer() {
        let written: BTreeMap<u64, bool> = [
            (1, false),
            (2, false),
            (3, true),
            (4, false),
            (5, false),
            (6, true),
        ]
        .into_iter()
        .collect();
        // Keep 2: versions 4 and 5, and the corrupt 6 above them.
        assert_eq!(to_delete(&written, 2), vec![1, 2, 3]);
        assert_eq!(to_delete(&written, 4), Vec::<u64>::new());
        assert_eq!(to_delete(&written, 3), vec![1]);
        // Fewer valid versions than asked for: nothing goes.
        let corrupt: BTreeMap<u64, bool> = [(1, true), (2, true)].into_iter().collect();
        assert!(to_delete(&corrupt, 1).is_empty());
    }

    #[test]
    fn every_fourth_reload_is_invalid_and_the_valid_ones_alternate() {
        let config = ConfigFile {
            path: PathBuf::from("/x/tandem.toml"),
            repository: PathBuf::from("/x/models"),
            socket: PathBuf::from("/x/run/coloc.sock"),
            device: "cpu".into(),
            budget_ms: 50.0,
        };
        let a = config.text(Variant::A);
        let b = config.text(Variant::B);
        assert_ne!(a, b);
        assert!(config.text(Variant::Invalid).contains("keep_versions = 0"));
        for text in [&a, &b] {
            assert!(text.contains("p99_ms = 50"), "{text}");
            assert!(text.contains("socket = \"/x/run/coloc.sock\""), "{text}");
        }
    }
}
