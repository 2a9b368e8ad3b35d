//! Co-location when the gateway goes away: trainers rejoin a restarted gateway and obey
//! it, are not stopped for rejoining mid-step, and are continued by the guardian when the
//! gateway that stopped them is killed (or its guardian is).

mod support;

use std::process::Child;
use std::time::Duration;

use support::coloc::*;
use support::*;

/// A gateway killed (SIGKILL: nothing of it runs) while it holds a trainer stopped: its
/// guardian process continues the trainer, which would otherwise stay frozen for good.
#[test]
fn a_trainer_stopped_by_a_gateway_that_is_killed_is_continued() {
    let mut s = start();
    let fake = a_stopped_trainer(&s);
    kill_the_gateway_and_expect_the_trainer_continued(&mut s, fake);
    // The guardian says so on the gateway's stderr just after the signal.
    wait_until("the guardian's log line", Duration::from_secs(5), || {
        s.server.log().contains("continued (SIGCONT)")
    });
}

/// The guardian itself killed while the trainer is stopped: the gateway starts another and
/// tells it what is stopped, so the trainer is still continued when the gateway dies.
#[test]
fn a_killed_guardian_is_replaced_and_told_what_is_stopped() {
    let mut s = start();
    let fake = a_stopped_trainer(&s);
    let first = guardian_of(s.server.pid()).expect("a guardian");
    // SAFETY: kill(2) on the guardian this test's gateway started.
    unsafe { libc::kill(first, libc::SIGKILL) };
    wait_until("another guardian", Duration::from_secs(10), || {
        guardian_of(s.server.pid()).is_some_and(|g| g != first)
    });
    kill_the_gateway_and_expect_the_trainer_continued(&mut s, fake);
}

/// A trainer that never acknowledges, joined and then stopped by the gateway (SIGSTOP).
fn a_stopped_trainer(s: &Setup) -> Child {
    let fake = fake_trainer(&s.socket, "never-ack", None);
    wait_until("the fake trainer to join", Duration::from_secs(10), || {
        connected(&s.server) == 1.0
    });
    squeeze(&s.server);
    wait_for_sigstop(&s.server, fake.id());
    fake
}

fn kill_the_gateway_and_expect_the_trainer_continued(s: &mut Setup, mut fake: Child) {
    s.server.signal(libc::SIGKILL);
    s.server
        .wait_exit(Duration::from_secs(10))
        .expect("the gateway to die");
    let continued = poll_until(Duration::from_secs(10), || process_state(fake.id()) != 'T');
    let state = process_state(fake.id());
    // SAFETY: kill(2) with our own child's pid, so that a failure leaves nothing stopped.
    unsafe { libc::kill(fake.id() as i32, libc::SIGCONT) };
    fake.kill().unwrap();
    fake.wait().unwrap();
    assert!(continued, "still stopped ({state}): {}", s.server.log());
}

/// The pid of the guardian process `gateway` started: its child named tandem-guardian.
fn guardian_of(gateway: i32) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.find_map(|entry| {
        let pid: i32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (name, rest) = stat.rsplit_once(')')?;
        let parent: i32 = rest.split_whitespace().nth(1)?.parse().ok()?;
        (name.ends_with("(tandem-guardian") && parent == gateway).then_some(pid)
    })
}

/// A gateway that restarts takes its trainers back: the real trainer rejoins the new one
/// and obeys it (its directives count from 1 again, which the trainer must not take for
/// ones it already obeyed).
#[test]
fn the_real_trainer_rejoins_a_restarted_gateway_and_obeys_it() {
    let mut s = start();
    let mut trainer = join_real_trainer(&s, "cpu", &[]);
    restart_the_gateway(&mut s);
    squeeze_and_expect_a_timely_ack(&s.server, trainer.id());
    assert!(
        metric(&s.server, "tandem_trainer_directives_total", None).unwrap_or(0.0) >= 1.0,
        "{}",
        s.server.log()
    );
    trainer.kill().unwrap();
    trainer.wait().unwrap();
}

/// The same with the Python client, from a loop that calls `step()` every 20 ms.
#[test]
fn the_python_client_rejoins_a_restarted_gateway_and_obeys_it() {
    let mut s = start();
    let mut child = join_python_client(&s, "coloc_loop.py");
    restart_the_gateway(&mut s);
    squeeze_and_expect_a_timely_ack(&s.server, child.id());
    child.kill().unwrap();
    child.wait().unwrap();
}

/// A loop whose steps outlast the ack deadline rejoins a restarted gateway mid-step, and
/// acknowledges the new gateway's first pause late. That pause is a precaution (the new
/// gateway has measured nothing yet), so the loop is not stopped for it; before, it was.
#[test]
fn a_trainer_with_long_steps_is_not_stopped_for_rejoining_a_restarted_gateway() {
    let mut s = start_with("cpu", "ack_within_ms = 50");
    let mut child = join_python_client_with(&s, "coloc_loop.py", &["1.0"]);
    restart_the_gateway_only(&mut s);
    wait_for_lending_having_stopped_nobody(&s.server);
    assert_ne!(process_state(child.id()), 'T');
    // The new gateway told it to pause (its first directive), then to train.
    assert!(
        metric(&s.server, "tandem_trainer_directives_total", None).unwrap_or(0.0) >= 2.0,
        "{}",
        s.server.log()
    );
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Has the trainer obey a few directives, restarts the gateway (SIGKILL) and waits for the
/// new one to lend to the trainer, having stopped it for nothing.
fn restart_the_gateway(s: &mut Setup) {
    // Directives on the first connection, so that its count is past the new one's start.
    squeeze(&s.server);
    relax(&s.server);
    restart_the_gateway_only(s);
    // A fresh gateway lends nothing for its first calm second, so a trainer that rejoins
    // then is told to pause at once, mid-step. That pause is a precaution, not enforced:
    // however late a loaded host makes the ack, the trainer is not stopped for rejoining.
    // Wait for the allowance, so what the caller tests is a pause the new gateway asks of a
    // trainer already obeying it: a client that ignored the new connection's directives
    // would still be stopped by it.
    wait_for_lending_having_stopped_nobody(&s.server);
}

fn wait_for_lending_having_stopped_nobody(server: &Server) {
    wait_until(
        "training allowed by the new gateway",
        Duration::from_secs(15),
        || metric(server, "tandem_training_allowance", None).unwrap_or(0.0) > 0.0,
    );
    assert_eq!(
        metric(server, "tandem_trainer_escalations_total", None).unwrap_or(0.0),
        0.0,
        "a rejoining trainer was stopped: {}",
        server.log()
    );
}

/// Kills the gateway with SIGKILL, starts a new one on the same config and waits for the
/// trainer to join it.
fn restart_the_gateway_only(s: &mut Setup) {
    let config = s._dir.path().join("tandem.toml");
    s.server.signal(libc::SIGKILL);
    s.server
        .wait_exit(Duration::from_secs(10))
        .expect("the gateway to die");
    s.server = Server::start(&["--config", config.to_str().unwrap(), "--device", "cpu"]);
    wait_until("the trainer to rejoin", Duration::from_secs(20), || {
        connected(&s.server) == 1.0
    });
}
