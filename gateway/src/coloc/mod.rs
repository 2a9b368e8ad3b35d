//! The trainer coordinator: lends the device's spare capacity to co-located training
//! processes and takes it back when serving needs it.
//!
//! Trainers connect to a Unix socket (mode 0600, in a private directory) and speak the
//! protocol in the `coloc-protocol` crate (docs/coloc-protocol.md). Every tick the coordinator reads
//! every model's signals, turns it into an allowance ([`allowance`]), and sends each trainer a
//! directive when it changes. A pause not acknowledged within `ack_within_ms` is enforced
//! with SIGSTOP — sent only to the process on the other end of the socket as the kernel
//! reports it (SO_PEERCRED), never to a pid a message names — and lifted with SIGCONT when
//! training is allowed again or the trainer disconnects. A trainer that sends garbage,
//! floods, overlong lines or nothing at all is disconnected; serving never waits on one.
//! On a GPU the coordinator also reads the device's free memory every tick and, while it is
//! below serving's reserve, lowers trainers' memory limits to take the shortfall back
//! ([`memory`]). A trainer inside the gateway's own process is steered the same way and
//! never signalled.

pub mod allowance;
mod connection;
mod coordinator;
pub mod guardian;
mod memory;
mod share;
mod slots;
mod trainer_slot;

use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::net::UnixListener;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::shutdown::Shutdown;
use connection::Event;
pub use coordinator::Context;
use coordinator::Coordinator;
pub use share::ServingShare;

/// The default socket: `$XDG_RUNTIME_DIR/tandem/coloc.sock`, else `/tmp/tandem-<uid>/coloc.sock`.
pub fn default_socket_path() -> PathBuf {
    let dir = std::env::var_os("XDG_RUNTIME_DIR")
        .map(|d| PathBuf::from(d).join("tandem"))
        // SAFETY: getuid has no preconditions and cannot fail.
        .unwrap_or_else(|| PathBuf::from(format!("/tmp/tandem-{}", unsafe { libc::getuid() })));
    dir.join("coloc.sock")
}

/// Binds the socket in a private (0700) directory, replacing a stale socket file, and
/// restricts it to its owner (0600). An existing directory must be ours and writable by no
/// one else (as OpenSSH requires of its control sockets' directories): under `/tmp`, another
/// user could have made it first and put a socket of their own there for our trainers.
pub fn bind(path: &Path) -> std::io::Result<UnixListener> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    if let Some(dir) = path.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        check_private(dir)?;
    }
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::AddrInUse,
            format!("{} is in use by another gateway", path.display()),
        ));
    }
    let _ = std::fs::remove_file(path);
    let listener = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Refuses a socket directory that is a symbolic link, not owned by this user, or writable
/// by its group or others.
fn check_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::symlink_metadata(dir)?;
    // SAFETY: getuid has no preconditions and cannot fail.
    let me = unsafe { libc::getuid() };
    let refuse = |why: String| {
        Err(std::io::Error::new(
            std::io::ErrorKind::PermissionDenied,
            format!(
                "refusing the trainer socket directory {}: {why}",
                dir.display()
            ),
        ))
    };
    if meta.file_type().is_symlink() {
        return refuse("it is a symbolic link".into());
    }
    if meta.uid() != me {
        return refuse(format!(
            "it is owned by uid {}, not by us ({me})",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return refuse(format!(
            "its group or others may write to it (mode {:o}); chmod go-w it",
            meta.mode() & 0o777
        ));
    }
    Ok(())
}

/// Runs until `shutdown`; on the way out every stopped trainer is continued.
pub async fn run(listener: UnixListener, context: Context, mut shutdown: Shutdown) {
    let (events_tx, mut events) = mpsc::channel::<Event>(1024);
    let mut tick = tokio::time::interval(context.tick());
    let mut coordinator = Coordinator::new(context, events_tx);
    // Accepting is paused after a failure (out of file descriptors and the like): the
    // pending connection stays in the backlog and a retry would fail at once.
    let mut accept_resumes: Option<Instant> = None;
    loop {
        tokio::select! {
            _ = shutdown.wait() => break,
            accepted = listener.accept(), if accept_resumes.is_none_or(|t| Instant::now() >= t) => {
                match accepted {
                    Ok((stream, _)) => coordinator.accept(stream),
                    Err(e) => {
                        tracing::warn!(error = %e, "accepting a trainer failed; retrying shortly");
                        accept_resumes = Some(Instant::now() + Duration::from_millis(50));
                    }
                }
            }
            event = events.recv() => match event {
                Some(event) => coordinator.handle(event, Instant::now()),
                None => break,
            },
            _ = tick.tick() => coordinator.tick(Instant::now()),
        }
    }
    coordinator.stop();
}

#[cfg(test)]
mod tests;
