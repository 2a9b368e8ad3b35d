//! The trainer's side of the co-location protocol, for Rust training loops.
//!
//! [`Coloc::connect`] says hello and waits for the welcome; a reader thread then keeps the
//! latest directive. The loop asks for it at every step boundary, blocks in
//! [`Coloc::wait_while_paused`] while told to pause, and acks what it applied. If the
//! gateway goes away, the trainer runs unconstrained and rejoins when it is back.

use std::io::{self, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::protocol::{
    self, Ack, Directive, GatewayMessage, Hello, Report, TrainerMessage, Welcome,
};

/// Between attempts to rejoin a gateway that went away: from the first to the last,
/// doubling.
const REJOIN_FIRST: Duration = Duration::from_millis(200);
const REJOIN_LAST: Duration = Duration::from_secs(5);

struct State {
    /// In this client's numbering (see `seq_offset`).
    directive: Directive,
    connected: bool,
    /// Added to the sequence numbers of the connection in force. Every connection numbers
    /// its directives from 1; the loop must see them keep rising across a rejoin, or it
    /// would take the new gateway's first directives for ones it already obeyed.
    seq_offset: u64,
    /// The connection's writer; none while disconnected. Shared out so that no write
    /// holds this state's lock (a write can block on a gateway that reads slowly).
    writer: Option<Arc<UnixStream>>,
    /// The `Coloc` was dropped: stop rejoining.
    closed: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub struct Coloc {
    shared: Arc<Shared>,
    /// One message at a time on the socket, whole lines only.
    send_lock: Mutex<()>,
    /// As the first gateway welcomed it.
    pub trainer_id: String,
    pub heartbeat: Duration,
}

/// Says hello on a fresh connection and waits for the welcome.
fn join(path: &Path, hello: &Hello) -> io::Result<(BufReader<UnixStream>, UnixStream, Welcome)> {
    let stream = UnixStream::connect(path)?;
    let mut writer = stream.try_clone()?;
    writer.write_all(&protocol::encode(&TrainerMessage::Hello(hello.clone())))?;
    stream.set_read_timeout(Some(Duration::from_secs(5)))?;
    let mut reader = BufReader::new(stream);
    let mut buf = Vec::new();
    let line = protocol::read_line(&mut reader, &mut buf)?.ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the gateway closed the connection before welcoming",
        )
    })?;
    let welcome = match serde_json::from_str::<GatewayMessage>(&line) {
        Ok(GatewayMessage::Welcome(w)) => w,
        other => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("expected welcome, got {other:?}"),
            ));
        }
    };
    reader.get_ref().set_read_timeout(None)?;
    Ok((reader, writer, welcome))
}

impl Coloc {
    pub fn connect(path: &Path, hello: Hello) -> io::Result<Coloc> {
        let (reader, writer, welcome) = join(path, &hello)?;
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                directive: Directive::unconstrained(&hello),
                connected: true,
                seq_offset: 0,
                writer: Some(Arc::new(writer)),
                closed: false,
            }),
            changed: Condvar::new(),
        });
        let feed = shared.clone();
        let path = path.to_path_buf();
        std::thread::Builder::new()
            .name("coloc-reader".into())
            .spawn(move || follow_gateway(reader, feed, hello, path))?;
        Ok(Coloc {
            shared,
            send_lock: Mutex::new(()),
            trainer_id: welcome.trainer_id,
            heartbeat: Duration::from_millis(welcome.heartbeat_ms.max(1)),
        })
    }

    /// The directive in force.
    pub fn directive(&self) -> Directive {
        self.lock().directive.clone()
    }

    pub fn connected(&self) -> bool {
        self.lock().connected
    }

    /// Blocks while the directive in force says pause; returns the one that lifted it.
    pub fn wait_while_paused(&self) -> Directive {
        let mut state = self.lock();
        while state.directive.pause && state.connected {
            state = self
                .shared
                .changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner());
        }
        state.directive.clone()
    }

    /// Blocks until a directive newer than `seq` arrives or `timeout` passes.
    pub fn wait_for_change(&self, seq: u64, timeout: Duration) -> Directive {
        let state = self.lock();
        let (state, _) = self
            .shared
            .changed
            .wait_timeout_while(state, timeout, |s| s.directive.seq == seq && s.connected)
            .unwrap_or_else(|p| p.into_inner());
        state.directive.clone()
    }

    /// Acknowledges the directive numbered `ack.seq` (in this client's numbering, as
    /// [`Coloc::directive`] gave it). An ack for a directive of an earlier connection is
    /// dropped: the gateway that sent it is gone.
    pub fn ack(&self, mut ack: Ack) -> io::Result<()> {
        let writer = {
            let state = self.lock();
            if ack.seq <= state.seq_offset {
                return Ok(());
            }
            ack.seq -= state.seq_offset;
            state.writer.clone()
        };
        self.send(writer, &TrainerMessage::Ack(ack))
    }

    pub fn report(&self, report: Report) -> io::Result<()> {
        let writer = self.lock().writer.clone();
        self.send(writer, &TrainerMessage::Report(report))
    }

    /// Writes one message on `writer`, the connection in force when it was taken; nothing
    /// while there is none.
    fn send(&self, writer: Option<Arc<UnixStream>>, message: &TrainerMessage) -> io::Result<()> {
        let Some(w) = writer else { return Ok(()) };
        let _one_at_a_time = self.send_lock.lock().unwrap_or_else(|p| p.into_inner());
        (&*w).write_all(&protocol::encode(message))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.lock()
    }
}

impl Drop for Coloc {
    fn drop(&mut self) {
        let mut state = self.lock();
        state.closed = true;
        // Wakes the reader thread blocked on the socket; it sees `closed` and ends.
        if let Some(w) = state.writer.take() {
            let _ = w.shutdown(std::net::Shutdown::Both);
        }
    }
}

/// The reader thread: keeps the latest directive; when the gateway goes away, lets the
/// trainer run unconstrained and tries to rejoin (a restarted gateway takes its trainers
/// back), until the `Coloc` is dropped.
fn follow_gateway(
    mut reader: BufReader<UnixStream>,
    shared: Arc<Shared>,
    hello: Hello,
    path: PathBuf,
) {
    loop {
        read_directives(&mut reader, &shared);
        {
            let mut state = shared.lock();
            state.connected = false;
            state.writer = None;
            // A new number, so that the loop applies it; the next connection's count
            // starts after it.
            let seq = state.directive.seq + 1;
            state.directive = Directive {
                seq,
                ..Directive::unconstrained(&hello)
            };
            state.seq_offset = seq;
            shared.changed.notify_all();
            if state.closed {
                return;
            }
        }
        tracing::warn!(socket = %path.display(), "the gateway went away; training unconstrained until it is back");
        let mut wait = REJOIN_FIRST;
        reader = loop {
            std::thread::sleep(wait);
            if shared.lock().closed {
                return;
            }
            if let Ok((r, w, welcome)) = join(&path, &hello) {
                let mut state = shared.lock();
                if state.closed {
                    let _ = w.shutdown(std::net::Shutdown::Both);
                    return;
                }
                state.writer = Some(Arc::new(w));
                state.connected = true;
                tracing::info!(trainer_id = %welcome.trainer_id, "rejoined the gateway");
                break r;
            }
            wait = (wait * 2).min(REJOIN_LAST);
        };
    }
}

/// Reads directives until the connection ends.
fn read_directives(reader: &mut BufReader<UnixStream>, shared: &Shared) {
    let mut buf = Vec::new();
    while let Ok(Some(line)) = protocol::read_line(reader, &mut buf) {
        if let Ok(GatewayMessage::Directive(mut d)) = serde_json::from_str::<GatewayMessage>(&line)
        {
            let mut state = shared.lock();
            d.seq += state.seq_offset;
            state.directive = d;
            shared.changed.notify_all();
        }
    }
}
