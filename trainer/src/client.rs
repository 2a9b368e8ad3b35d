//! The trainer's side of the co-location protocol, for Rust training loops.
//!
//! [`Coloc::connect`] says hello and waits for the welcome; a reader thread then keeps the
//! latest directive. The loop asks for it at every step boundary, blocks in
//! [`Coloc::wait_while_paused`] while told to pause, and acks what it applied. If the
//! gateway goes away, the trainer runs unconstrained.

use std::io::{self, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::protocol::{self, Ack, Directive, GatewayMessage, Hello, Report, TrainerMessage};

struct State {
    directive: Directive,
    connected: bool,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

pub struct Coloc {
    shared: Arc<Shared>,
    writer: Mutex<UnixStream>,
    pub trainer_id: String,
    pub heartbeat: Duration,
}

impl Coloc {
    pub fn connect(path: &Path, hello: Hello) -> io::Result<Coloc> {
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
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                directive: Directive::unconstrained(&hello),
                connected: true,
            }),
            changed: Condvar::new(),
        });
        let feed = shared.clone();
        std::thread::Builder::new()
            .name("coloc-reader".into())
            .spawn(move || read_directives(reader, feed, hello))?;
        Ok(Coloc {
            shared,
            writer: Mutex::new(writer),
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

    pub fn ack(&self, ack: Ack) -> io::Result<()> {
        self.send(&TrainerMessage::Ack(ack))
    }

    pub fn report(&self, report: Report) -> io::Result<()> {
        self.send(&TrainerMessage::Report(report))
    }

    fn send(&self, message: &TrainerMessage) -> io::Result<()> {
        if !self.connected() {
            return Ok(());
        }
        let mut w = self.writer.lock().unwrap_or_else(|p| p.into_inner());
        w.write_all(&protocol::encode(message))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn read_directives(mut reader: BufReader<UnixStream>, shared: Arc<Shared>, hello: Hello) {
    let mut buf = Vec::new();
    while let Ok(Some(line)) = protocol::read_line(&mut reader, &mut buf) {
        if let Ok(GatewayMessage::Directive(d)) = serde_json::from_str::<GatewayMessage>(&line) {
            let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
            state.directive = d;
            shared.changed.notify_all();
        }
    }
    // The gateway is gone: nobody lends or withholds capacity any more.
    let mut state = shared.state.lock().unwrap_or_else(|p| p.into_inner());
    state.connected = false;
    state.directive = Directive::unconstrained(&hello);
    shared.changed.notify_all();
}
