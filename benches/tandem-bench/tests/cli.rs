//! The benchmarks' command line: every scenario is offered, and a wrong flag is refused
//! with a message that names it. (The scenarios themselves run against real servers in the
//! root package's tests, which find this binary beside `tandem`.)

use std::process::Command;

#[test]
fn every_scenario_is_offered() {
    let out = Command::new(env!("CARGO_BIN_EXE_tandem-bench"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for scenario in ["forward", "load", "sweep", "coloc", "soak"] {
        assert!(help.contains(scenario), "{scenario} missing from:\n{help}");
    }
}

#[test]
fn an_unknown_flag_is_refused_by_name() {
    let out = Command::new(env!("CARGO_BIN_EXE_tandem-bench"))
        .args(["load", "--no-such-flag"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--no-such-flag"), "{stderr}");
}
