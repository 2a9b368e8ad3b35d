//! tandem's co-location protocol, version 1: newline-delimited JSON over a Unix stream socket.
//!
//! trainer → gateway: `hello` first, then `ack` for every directive once obeyed and
//! `report` at least every heartbeat. gateway → trainer: `welcome`, then `directive`s.
//! Unknown fields are ignored (they may be added); unknown message types are errors. A line
//! is at most [`MAX_LINE`] bytes.

use std::io::{self, BufRead};

use serde::{Deserialize, Serialize};

pub const VERSION: u32 = 1;
/// Longest line either side accepts; a longer one ends the connection.
pub const MAX_LINE: usize = 64 * 1024;

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum TrainerMessage {
    Hello(Hello),
    Ack(Ack),
    Report(Report),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum GatewayMessage {
    Welcome(Welcome),
    Directive(Directive),
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Hello {
    pub version: u32,
    pub name: String,
    /// The trainer's own idea of its pid; the gateway trusts only the kernel's
    /// (SO_PEERCRED) and never signals a pid a message claims.
    pub pid: i64,
    /// `cpu` or `cuda:N`.
    pub device: String,
    /// Streams (threads on a CPU) the trainer would use unconstrained.
    pub max_streams: u32,
    /// Device memory the trainer would use unconstrained, in bytes: parameters, gradients,
    /// optimiser state, workspaces and a full batch's activations.
    pub memory_bytes: u64,
    /// The least device memory the trainer can run in, in bytes (what it holds whatever
    /// its micro-batch, and one row's activations); 0 when it does not say. Memory limits
    /// are lent above it.
    #[serde(default)]
    pub min_memory_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Welcome {
    pub version: u32,
    pub trainer_id: String,
    /// Send a report at least this often.
    pub heartbeat_ms: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Directive {
    /// Increases with every directive on a connection; acks name it.
    pub seq: u64,
    /// The share of the device lent to training, 0..1.
    pub allowance: f64,
    /// Streams (threads on a CPU) the trainer may use.
    pub max_streams: u32,
    /// Device memory the trainer may hold, in bytes.
    pub memory_limit_bytes: u64,
    /// The share of wall time the trainer may compute, 0..1 (it sleeps the rest).
    pub duty_cycle: f64,
    /// Stop at the next step boundary until a directive says otherwise.
    pub pause: bool,
    /// Ack within this long or be stopped (SIGSTOP) until allowed again.
    pub ack_within_ms: u64,
    /// Why, for humans: `headroom`, `budget pressure`, `shedding`, ...
    pub reason: String,
}

impl Directive {
    /// What a trainer runs with before the gateway says anything: everything it asked for.
    pub fn unconstrained(hello: &Hello) -> Directive {
        Directive {
            seq: 0,
            allowance: 1.0,
            max_streams: hello.max_streams,
            memory_limit_bytes: hello.memory_bytes,
            duty_cycle: 1.0,
            pause: false,
            ack_within_ms: 0,
            reason: "not connected".into(),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Ack {
    pub seq: u64,
    /// Streams (threads) in use now: 0 while paused.
    pub streams: u32,
    /// Device memory held now, in bytes, once the directive is obeyed: everything resident,
    /// paused or not.
    pub memory_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub step: u64,
    pub samples_per_second: f64,
    pub loss: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accuracy: Option<f64>,
}

/// Reads one line of at most [`MAX_LINE`] bytes (without the newline). `Ok(None)` at end of
/// stream; an error for a longer line or invalid UTF-8.
pub fn read_line(reader: &mut impl BufRead, buf: &mut Vec<u8>) -> io::Result<Option<String>> {
    buf.clear();
    loop {
        let available = reader.fill_buf()?;
        if available.is_empty() {
            return if buf.is_empty() {
                Ok(None)
            } else {
                Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "stream ended mid-line",
                ))
            };
        }
        let (chunk, done) = match available.iter().position(|b| *b == b'\n') {
            Some(i) => (&available[..i], Some(i + 1)),
            None => (available, None),
        };
        if buf.len() + chunk.len() > MAX_LINE {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("line longer than {MAX_LINE} bytes"),
            ));
        }
        buf.extend_from_slice(chunk);
        let used = done.unwrap_or(chunk.len());
        reader.consume(used);
        if done.is_some() {
            return String::from_utf8(std::mem::take(buf))
                .map(Some)
                .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "line is not UTF-8"));
        }
    }
}

/// One message as a line, newline included.
pub fn encode<T: Serialize>(message: &T) -> Vec<u8> {
    let mut line = serde_json::to_vec(message).expect("protocol messages serialize");
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_match_the_documented_wire_format() {
        let hello: TrainerMessage = serde_json::from_str(
            r#"{"type":"hello","version":1,"name":"t","pid":42,"device":"cpu","max_streams":2,"memory_bytes":1024,"extra":"ignored"}"#,
        )
        .unwrap();
        assert!(matches!(
            hello,
            TrainerMessage::Hello(Hello {
                pid: 42,
                min_memory_bytes: 0,
                ..
            })
        ));
        let d = GatewayMessage::Directive(Directive {
            seq: 3,
            allowance: 0.5,
            max_streams: 1,
            memory_limit_bytes: 10,
            duty_cycle: 0.5,
            pause: false,
            ack_within_ms: 200,
            reason: "x".into(),
        });
        let text = String::from_utf8(encode(&d)).unwrap();
        assert!(
            text.starts_with(r#"{"type":"directive","seq":3,"allowance":0.5"#),
            "{text}"
        );
        assert!(text.ends_with('\n'));
        assert!(serde_json::from_str::<TrainerMessage>(r#"{"type":"launch"}"#).is_err());
    }

    #[test]
    fn lines_are_bounded() {
        let mut buf = Vec::new();
        let mut ok = std::io::BufReader::new(&b"one\ntwo\n"[..]);
        assert_eq!(
            read_line(&mut ok, &mut buf).unwrap().as_deref(),
            Some("one")
        );
        assert_eq!(
            read_line(&mut ok, &mut buf).unwrap().as_deref(),
            Some("two")
        );
        assert_eq!(read_line(&mut ok, &mut buf).unwrap(), None);
        let long = vec![b'x'; MAX_LINE + 10];
        let mut r = std::io::BufReader::new(&long[..]);
        assert!(read_line(&mut r, &mut buf).is_err());
    }
}
