//! One trainer's connection: the hello (within a deadline), then its messages in and
//! directives out. Everything a misbehaving trainer can do here ends in a disconnect:
//! garbage, lines over the limit, floods, silence.

use std::time::Duration;

use coloc_protocol::{
    self as protocol, Ack, GatewayMessage, Hello, Report, TrainerMessage, VERSION, Welcome,
};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::slots::Tag;
use super::trainer_slot::Outbound;
use crate::config::ColocConfig;

/// What a connection tells the coordinator.
pub enum Event {
    Joined {
        tag: Tag,
        hello: Hello,
        peer_pid: i32,
        outbound: mpsc::Sender<Outbound>,
    },
    Ack {
        tag: Tag,
        ack: Ack,
    },
    Report {
        tag: Tag,
        report: Report,
    },
    Left {
        tag: Tag,
        why: String,
    },
}

/// Bad lines tolerated before the trainer is disconnected.
const MAX_STRIKES: u32 = 10;
/// Lines per second beyond which a trainer is flooding.
const MAX_LINES_PER_SECOND: u32 = 200;

/// Serves one connection; whatever ends it, the coordinator hears that it left, so its
/// slot is freed.
pub async fn run(
    stream: UnixStream,
    tag: Tag,
    peer_pid: i32,
    config: ColocConfig,
    events: mpsc::Sender<Event>,
) {
    let why = serve(stream, tag, peer_pid, &config, &events).await;
    let _ = events.send(Event::Left { tag, why }).await;
}

type Reader = BufReader<tokio::net::unix::OwnedReadHalf>;
type Writer = tokio::net::unix::OwnedWriteHalf;

async fn serve(
    stream: UnixStream,
    tag: Tag,
    peer_pid: i32,
    config: &ColocConfig,
    events: &mpsc::Sender<Event>,
) -> String {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let mut buf = Vec::new();
    let hello = match greet(&mut reader, &mut buf, &mut write, tag, peer_pid, config).await {
        Ok(hello) => hello,
        Err(why) => return why,
    };
    let (out_tx, out_rx) = mpsc::channel::<Outbound>(16);
    let joined = Event::Joined {
        tag,
        hello,
        peer_pid,
        outbound: out_tx,
    };
    if events.send(joined).await.is_err() {
        return "the coordinator stopped".into();
    }
    relay(reader, buf, write, out_rx, tag, events).await
}

/// The hello, within 5 s, in a supported version; the welcome in answer.
async fn greet(
    reader: &mut Reader,
    buf: &mut Vec<u8>,
    write: &mut Writer,
    tag: Tag,
    peer_pid: i32,
    config: &ColocConfig,
) -> Result<Hello, String> {
    let hello = match tokio::time::timeout(Duration::from_secs(5), read_line(reader, buf)).await {
        Err(_) => return Err("no hello within 5 s".into()),
        Ok(Err(e)) => return Err(format!("bad hello: {e}")),
        Ok(Ok(None)) => return Err("closed before hello".into()),
        Ok(Ok(Some(line))) => match serde_json::from_str::<TrainerMessage>(&line) {
            Ok(TrainerMessage::Hello(h)) if h.version == VERSION => h,
            Ok(TrainerMessage::Hello(h)) => {
                return Err(format!("unsupported protocol version {}", h.version));
            }
            _ => return Err("the first message was not a hello".into()),
        },
    };
    let welcome = GatewayMessage::Welcome(Welcome {
        version: VERSION,
        trainer_id: format!("t{}-{peer_pid}", tag.slot),
        heartbeat_ms: config.heartbeat_ms,
    });
    if write.write_all(&protocol::encode(&welcome)).await.is_err() {
        return Err("cannot write the welcome".into());
    }
    Ok(hello)
}

/// Directives out and messages in until either side ends it; returns why.
async fn relay(
    mut reader: Reader,
    mut buf: Vec<u8>,
    mut write: Writer,
    mut out_rx: mpsc::Receiver<Outbound>,
    tag: Tag,
    events: &mpsc::Sender<Event>,
) -> String {
    let mut police = Police::default();
    loop {
        tokio::select! {
            out = out_rx.recv() => match out {
                Some(Outbound::Close(why)) => return why,
                Some(Outbound::Directive(d)) => {
                    let line = protocol::encode(&GatewayMessage::Directive(d));
                    match tokio::time::timeout(Duration::from_secs(1), write.write_all(&line)).await {
                        Ok(Ok(())) => {}
                        _ => return "cannot deliver a directive".into(),
                    }
                }
                None => return "the coordinator stopped".into(),
            },
            line = read_line(&mut reader, &mut buf) => {
                let line = match line {
                    Err(e) => return format!("read error: {e}"),
                    Ok(None) => return "disconnected".into(),
                    Ok(Some(line)) => line,
                };
                let event = match police.admit(&line, tag) {
                    Err(why) => return why,
                    Ok(None) => continue,
                    Ok(Some(event)) => event,
                };
                // The coordinator's queue is bounded: a trainer that outpaces it is flooding.
                if events.try_send(event).is_err() {
                    return "flooding: the coordinator cannot keep up".into();
                }
            }
        }
    }
}

/// What a trainer may send: lines at a bounded rate, and few that are not messages.
struct Police {
    strikes: u32,
    /// The current second and the lines in it.
    window: (Instant, u32),
}

impl Default for Police {
    fn default() -> Self {
        Police {
            strikes: 0,
            window: (Instant::now(), 0),
        }
    }
}

impl Police {
    /// The event a line makes, `None` for a bad line tolerated, or why the trainer is
    /// disconnected.
    fn admit(&mut self, line: &str, tag: Tag) -> Result<Option<Event>, String> {
        if self.window.0.elapsed() >= Duration::from_secs(1) {
            self.window = (Instant::now(), 0);
        }
        self.window.1 += 1;
        if self.window.1 > MAX_LINES_PER_SECOND {
            return Err(format!(
                "flooding: over {MAX_LINES_PER_SECOND} lines in a second"
            ));
        }
        match serde_json::from_str::<TrainerMessage>(line) {
            Ok(TrainerMessage::Ack(ack)) => Ok(Some(Event::Ack { tag, ack })),
            Ok(TrainerMessage::Report(report)) => Ok(Some(Event::Report { tag, report })),
            Ok(TrainerMessage::Hello(_)) | Err(_) => {
                self.strikes += 1;
                if self.strikes > MAX_STRIKES {
                    return Err(format!("over {MAX_STRIKES} invalid messages"));
                }
                Ok(None)
            }
        }
    }
}

/// A line of at most `MAX_LINE` bytes; `Ok(None)` at end of stream.
async fn read_line(reader: &mut Reader, buf: &mut Vec<u8>) -> std::io::Result<Option<String>> {
    buf.clear();
    loop {
        let available = reader.fill_buf().await?;
        if available.is_empty() {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "stream ended mid-line",
                ))
            };
        }
        let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if buf.len() + chunk.len() > protocol::MAX_LINE {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("line longer than {} bytes", protocol::MAX_LINE),
            ));
        }
        buf.extend_from_slice(chunk);
        let used = done.unwrap_or(chunk.len());
        reader.consume(used);
        if done.is_some() {
            return String::from_utf8(std::mem::take(buf))
                .map(Some)
                .map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::InvalidData, "line is not UTF-8")
                });
        }
    }
}
