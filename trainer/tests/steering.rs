//! The reference trainer against a scripted gateway on a Unix socket: it says what it
//! would hold, obeys memory limits by shrinking its micro-batch and freeing its scratch
//! before it acks, and acks what it holds then (paused or not). Inside the gateway's
//! process it joins the same way, under the process's own pid.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use kernels::Device;
use models::train::Adam;
use serde_json::{Value, json};
use trainer::in_process::{InProcessConfig, InProcessTrainer};
use trainer::run::{DataSource, TrainConfig, run};

fn socket(tag: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("tandem-{tag}-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

fn config(socket: PathBuf) -> TrainConfig {
    TrainConfig {
        data: DataSource::Synthetic(vec![8, 32, 4]),
        hidden: Vec::new(),
        device: Device::Cpu,
        batch: 64,
        adam: Adam::default(),
        max_steps: None,
        max_time: Some(Duration::from_secs(60)),
        target_accuracy: None,
        threads: 1,
        seed: 1,
        repository: None,
        model_name: "syn".into(),
        checkpoint_every: Duration::from_secs(3600),
        keep_versions: 0,
        coloc_socket: Some(socket),
        name: "test".into(),
        idle_priority: false,
        unmanaged: false,
    }
}

/// The gateway's side of one connection.
struct Gateway {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    seq: u64,
}

impl Gateway {
    /// Accepts the trainer and answers its hello.
    fn accept(listener: &UnixListener) -> (Gateway, Value) {
        let (stream, _) = listener.accept().unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let mut g = Gateway {
            reader: BufReader::new(stream.try_clone().unwrap()),
            writer: stream,
            seq: 0,
        };
        let hello = g.line();
        assert_eq!(hello["type"], "hello");
        g.send(json!({"type": "welcome", "version": 1, "trainer_id": "t0", "heartbeat_ms": 100}));
        (g, hello)
    }

    fn line(&mut self) -> Value {
        let mut line = String::new();
        assert!(
            self.reader.read_line(&mut line).unwrap() > 0,
            "the trainer hung up"
        );
        serde_json::from_str(&line).unwrap()
    }

    fn send(&mut self, message: Value) {
        let mut line = message.to_string();
        line.push('\n');
        self.writer.write_all(line.as_bytes()).unwrap();
    }

    /// Sends a directive and returns its ack (reports in between are skipped).
    fn direct(&mut self, pause: bool, memory_limit_bytes: u64) -> Value {
        self.seq += 1;
        self.send(json!({
            "type": "directive", "seq": self.seq, "allowance": if pause { 0.0 } else { 1.0 },
            "max_streams": 1, "memory_limit_bytes": memory_limit_bytes,
            "duty_cycle": 1.0, "pause": pause, "ack_within_ms": 5000, "reason": "test"
        }));
        loop {
            let m = self.line();
            if m["type"] == "ack" {
                assert_eq!(m["seq"], self.seq);
                return m;
            }
        }
    }
}

#[test]
fn memory_limits_shrink_the_micro_batch_and_acks_say_what_is_held() {
    let path = socket("steer");
    let listener = UnixListener::bind(&path).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let cfg = config(path.clone());
    let flag = stop.clone();
    let trainer = std::thread::spawn(move || run(&cfg, &flag));

    let (mut g, hello) = Gateway::accept(&listener);
    let most = hello["memory_bytes"].as_u64().unwrap();
    let least = hello["min_memory_bytes"].as_u64().unwrap();
    assert!(0 < least && least < most, "{hello}");
    assert_eq!(hello["pid"], std::process::id());
    // Paused with room for a full batch: it holds exactly what it said it would.
    let full = g.direct(true, most);
    assert_eq!(full["streams"], 0);
    assert_eq!(full["memory_bytes"], most);
    // A quarter of the room above its least, still paused: its scratch shrinks at once.
    let limit = least + (most - least) / 4;
    let squeezed = g.direct(true, limit);
    let held = squeezed["memory_bytes"].as_u64().unwrap();
    assert!(
        held <= limit && held < most,
        "{held} of {limit} ({most} before)"
    );
    // Running within it.
    let running = g.direct(false, limit);
    assert_eq!(running["streams"], 1);
    assert_eq!(running["memory_bytes"], held);
    // Given everything back.
    let back = g.direct(false, most);
    assert_eq!(back["memory_bytes"], most);

    stop.store(true, Ordering::Relaxed);
    let summary = trainer.join().unwrap().unwrap();
    assert!(summary.directives_applied >= 4, "{summary:?}");
    assert!(summary.steps > 0);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn an_in_process_trainer_joins_under_this_process_and_stops_when_asked() {
    let path = socket("inproc");
    let cfg = InProcessConfig {
        train: config(PathBuf::from("/nonexistent")),
        socket: path.clone(),
        sm_share: None,
        join_within: Duration::from_secs(30),
    };
    // Started before the gateway listens: it waits for the socket.
    let trainer = InProcessTrainer::spawn(cfg).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let listener = UnixListener::bind(&path).unwrap();
    let (mut g, hello) = Gateway::accept(&listener);
    assert_eq!(hello["pid"], std::process::id());
    assert_eq!(hello["max_streams"], 1);
    let most = hello["memory_bytes"].as_u64().unwrap();
    assert_eq!(g.direct(false, most)["memory_bytes"], most);
    // It trains: a report of a step past the first.
    loop {
        let m = g.line();
        if m["type"] == "report" && m["step"].as_u64().unwrap() > 1 {
            break;
        }
    }
    assert!(!trainer.is_finished());
    let summary = trainer.stop().unwrap();
    assert!(summary.steps > 1, "{summary:?}");
    let _ = std::fs::remove_file(&path);
}
