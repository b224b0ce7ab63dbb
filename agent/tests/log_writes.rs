//! A log line that cannot be written never ends the agent. `kura-agent
//! run` with its standard error on `/dev/full` (every write fails with
//! ENOSPC, as on a full disk under the log file) and no cluster to reach:
//! it logs the failure at ERROR from the main thread and must end with its
//! own exit code (1), not a panic's (101). Before the fix, tracing's
//! fallback report of the failed write (`eprintln!`, to the same standard
//! error) panicked.

use std::fs::OpenOptions;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn run_on_a_full_log_disk_ends_with_its_own_exit_code_not_a_panic() {
    let full = OpenOptions::new()
        .write(true)
        .open("/dev/full")
        .expect("/dev/full");
    let dir = std::env::temp_dir().join(format!("kura-log-writes-{}", std::process::id()));
    let mut child = Command::new(env!("CARGO_BIN_EXE_kura-agent"))
        .arg("run")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", &dir)
        .env("KUBECONFIG", dir.join("no-such-kubeconfig"))
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(full))
        .spawn()
        .expect("spawn kura-agent run");
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("kura-agent run did not end within 60 s without a cluster");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        status.code(),
        Some(1),
        "a run that cannot reach a cluster ends with 1; 101 is a panic: {status:?}"
    );
}
