//! The `tandem serve` a bench starts for itself: the `tandem` beside this binary, from a
//! config file the bench
//! wrote, on a free port, its log in a file; killed when dropped. Also what the benches
//! read of a process from /proc.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::Context;

use super::cores;

/// The `tandem` to start servers and trainers from: `TANDEM_BIN` if set, else the one
/// beside this binary (the same build's, in cargo's target folder), else `tandem` on the
/// `PATH`.
pub fn tandem() -> PathBuf {
    if let Some(bin) = std::env::var_os("TANDEM_BIN") {
        return PathBuf::from(bin);
    }
    let beside = std::env::current_exe().map(|exe| exe.with_file_name("tandem"));
    match beside {
        Ok(path) if path.is_file() => path,
        _ => PathBuf::from("tandem"),
    }
}

pub struct ServeProcess {
    pub child: Child,
    pub url: String,
    /// The gRPC listener's `HOST:PORT`.
    pub grpc: Option<String>,
    pub log: PathBuf,
}

impl ServeProcess {
    /// Starts `tandem serve --listen 127.0.0.1:0 --grpc-listen 127.0.0.1:0 --config CONFIG` (on `pin` cores only, if
    /// given), its stderr to `log`, and waits until it has said where it listens and that
    /// it is ready.
    pub fn start(config: &Path, log: &Path, pin: Option<&[usize]>) -> anyhow::Result<Self> {
        let mut cmd = Command::new(tandem());
        if let Some(pin) = pin {
            cores::pin_child(&mut cmd, pin);
        }
        let child = cmd
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--grpc-listen",
                "127.0.0.1:0",
            ])
            .arg("--config")
            .arg(config)
            .stderr(std::fs::File::create(log)?)
            .stdout(Stdio::null())
            .spawn()
            .context("starting tandem serve")?;
        let mut server = ServeProcess {
            child,
            url: String::new(),
            grpc: None,
            log: log.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let addr = text
                .split("listening addr=")
                .nth(1)
                .and_then(|r| r.split_whitespace().next());
            if let (Some(addr), true) = (addr, text.contains("serving ready=true")) {
                server.url = format!("http://{addr}");
                server.grpc = (text.split("grpc_addr=").nth(1))
                    .and_then(|r| r.split_whitespace().next())
                    .map(str::to_string);
                return Ok(server);
            }
            if let Some(status) = server.child.try_wait()? {
                anyhow::bail!("the server exited ({status}); see {}", log.display());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        anyhow::bail!("the server did not become ready; see {}", log.display())
    }

    /// How the process ended, if it has: a signal's number or an exit code, in words.
    pub fn exited(&mut self) -> Option<String> {
        let status = self.child.try_wait().ok()??;
        Some(match status.signal() {
            Some(sig) => format!("killed by signal {sig}"),
            None => format!("exited with {status}"),
        })
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// CPU seconds (user + system) a process has used, from /proc.
pub fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    // Fields after the name: state is [0], utime [11], stime [12] (in clock ticks).
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz.max(1.0)
}
