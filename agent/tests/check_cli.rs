//! The `kura-agent check` binary: exit codes 0 (pass), 1 (fail) and 2
//! (usage or input error), one line per poll naming the verdict and the
//! signal, JSON lines with `--json`, against simulated nodes on loopback.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kura_sim::{SimPodHandle, Simulator};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_kura-agent"))
}

fn node_args(sim: &Simulator) -> Vec<String> {
    sim.pods()
        .iter()
        .flat_map(|p| ["--node".to_owned(), format!("http://{}", p.addr())])
        .collect()
}

/// Runs the binary to completion off the runtime's threads (the simulated
/// nodes keep answering meanwhile).
async fn run(args: Vec<String>) -> (i32, String, String) {
    tokio::task::spawn_blocking(move || {
        let out = bin().args(&args).output().unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    })
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_healthy_set_passes_with_exit_0_and_every_line_names_verdict_and_signal() {
    let sim = Simulator::healthy("ok", 3).await.unwrap();
    let started = Instant::now();
    let mut args = node_args(&sim);
    args.extend(["--soak", "1s", "--interval", "200ms", "--timeout", "1h"].map(String::from));
    let (code, out, err) = run([vec!["check".to_owned()], args].concat()).await;
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines.len() >= 5, "{out}");
    assert!(
        lines[0].contains("baseline fdTimeoutCount 0"),
        "{}",
        lines[0]
    );
    for line in &lines[..lines.len() - 1] {
        assert!(line.contains("verdict=soak signal=soaking"), "{line}");
    }
    let last = lines[lines.len() - 1];
    assert!(last.contains("verdict=pass signal=none"), "{last}");
    assert!(last.contains("3/3 nodes sampled"), "{last}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_lines_carry_verdict_signal_and_evidence() {
    let sim = Simulator::healthy("js", 2).await.unwrap();
    let mut args = node_args(&sim);
    args.extend(["--soak", "600ms", "--interval", "200ms", "--json"].map(String::from));
    let (code, out, err) = run([vec!["check".to_owned()], args].concat()).await;
    assert_eq!(code, 0, "stdout:\n{out}\nstderr:\n{err}");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for l in &lines {
        assert!(
            l.get("verdict").is_some() && l.get("signal").is_some(),
            "{l}"
        );
        assert_eq!(l["health"]["expectedPods"], 2);
    }
    assert_eq!(lines[0]["poll"], 0);
    assert_eq!(lines[0]["baselineEligible"], true);
    let last = lines.last().unwrap();
    assert_eq!(last["verdict"], "pass");
    assert_eq!(last["signal"], serde_json::Value::Null);
    assert_eq!(last["final"], true);
}

/// Starts the binary with `--json`, applies `regress` once the baseline
/// line is out, and returns the exit code and every line.
async fn run_with_regression(
    sim: &Simulator,
    extra: &[&str],
    regress: impl FnOnce(&[SimPodHandle]),
) -> (i32, Vec<serde_json::Value>) {
    let mut args = vec!["check".to_owned(), "--json".to_owned()];
    args.extend(node_args(sim));
    args.extend(extra.iter().map(|s| (*s).to_owned()));
    let mut child = bin()
        .args(&args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let _ = tx.send(line.unwrap());
        }
    });
    let first = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap();
    regress(sim.pods());
    let code = tokio::time::timeout(
        Duration::from_secs(15),
        tokio::task::spawn_blocking(move || child.wait().unwrap()),
    )
    .await
    .expect("check ends within its timeout")
    .unwrap()
    .code()
    .unwrap_or(-1);
    reader.join().unwrap();
    let mut lines = vec![serde_json::from_str(&first).unwrap()];
    while let Ok(l) = rx.try_recv() {
        lines.push(serde_json::from_str(&l).unwrap());
    }
    (code, lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fd_timeout_growth_fails_with_exit_1_at_the_timeout_naming_the_signal() {
    let sim = Simulator::healthy("fd", 2).await.unwrap();
    let (code, lines) = run_with_regression(
        &sim,
        &["--soak", "2s", "--interval", "200ms", "--timeout", "3s"],
        |pods| pods[0].update(|n| n.fd_timeout_count += 2),
    )
    .await;
    assert_eq!(code, 1);
    let last = lines.last().unwrap();
    assert_eq!(last["verdict"], "hard_stop");
    assert_eq!(last["signal"], "wave_deadline_exceeded");
    assert_eq!(last["lastFailingSignal"], "fd_timeouts_regressed");
    assert_eq!(last["evidence"][1]["signal"], "fd_timeouts_regressed");
    assert_eq!(last["evidence"][1]["baseline"], 0);
    assert_eq!(last["evidence"][1]["observed"], 2);
    assert_eq!(last["nodes"][0], sim.pods()[0].url());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn critical_pressure_fails_with_exit_1_at_once() {
    let sim = Simulator::healthy("mem", 2).await.unwrap();
    let started = Instant::now();
    let (code, lines) = run_with_regression(
        &sim,
        &["--soak", "30s", "--interval", "200ms", "--timeout", "60s"],
        |pods| pods[1].update(|n| n.memory_pressure_state = 2),
    )
    .await;
    assert_eq!(code, 1);
    assert!(started.elapsed() < Duration::from_secs(10));
    let last = lines.last().unwrap();
    assert_eq!(last["verdict"], "hard_stop");
    assert_eq!(last["signal"], "memory_pressure_critical");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn usage_and_input_errors_exit_2() {
    let cases: &[&[&str]] = &[
        &[],
        &["--node", "https://127.0.0.1:4000"],
        &["--node", "127.0.0.1:4000"],
        &["--node", "http://127.0.0.1:4000/metrics"],
        &[
            "--node",
            "http://127.0.0.1:4000",
            "--node",
            "http://127.0.0.1:4000/",
        ],
        &["--node", "http://127.0.0.1:4000", "--soak", "5 parsecs"],
        &["--node", "http://127.0.0.1:4000", "--interval", "0s"],
        &["--node", "http://127.0.0.1:4000", "--expected-pods", "0"],
        &[
            "--node",
            "http://127.0.0.1:4000",
            "--soak",
            "10m",
            "--timeout",
            "2m",
        ],
        &["--node", "http://127.0.0.1:4000", "--bogus"],
        // A port out of range is refused, never polled as port 80.
        &["--node", "http://127.0.0.1:99999"],
        &["--node", "http://127.0.0.1:65536"],
        &["--node", "http://127.0.0.1:0"],
        // One node spelled twice, or under two names, counts once: refused.
        &[
            "--node",
            "http://127.0.0.2:4100",
            "--node",
            "http://127.0.0.2:04100",
        ],
        &[
            "--node",
            "http://localhost:4100",
            "--node",
            "http://127.0.0.1:4100/status/rollout",
        ],
    ];
    for case in cases {
        let mut args = vec!["check".to_owned()];
        args.extend(case.iter().map(|s| (*s).to_owned()));
        let (code, out, err) = run(args).await;
        assert_eq!(code, 2, "{case:?}: stdout {out:?} stderr {err:?}");
        assert!(out.is_empty(), "{case:?}: {out}");
        assert!(!err.is_empty(), "{case:?}");
    }
}

/// The two defects adversarial testing found, with the reasons on
/// standard error: a port out of range silently polled port 80, and one
/// node given as `:4100` and `:04100` was counted twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_ports_and_one_node_twice_are_named() {
    for port in ["99999", "65536"] {
        let (code, out, err) = run(vec![
            "check".to_owned(),
            "--node".to_owned(),
            format!("http://host:{port}"),
        ])
        .await;
        assert_eq!(code, 2, "{port}: {out}{err}");
        assert!(
            err.contains(&format!(
                "the port must be a number from 1 to 65535, not \"{port}\""
            )),
            "{err}"
        );
    }
    // A real node answers on 127.x:port; the same node with a zero-padded
    // port is refused before anything is polled.
    let sim = Simulator::healthy("dup", 1).await.unwrap();
    let addr = sim.pods()[0].addr();
    let padded = format!("http://{}:0{}", addr.ip(), addr.port());
    let (code, out, err) = run(vec![
        "check".to_owned(),
        "--node".to_owned(),
        format!("http://{addr}"),
        "--node".to_owned(),
        padded,
    ])
    .await;
    assert_eq!(code, 2, "{out}{err}");
    assert!(out.is_empty());
    assert!(err.contains("is given twice"), "{err}");
    assert_eq!(sim.pods()[0].stats().requests(), 0, "nothing was polled");
}

#[test]
fn durations_are_written_like_8s_2m_1h() {
    use kura_agent::model::parse::parse_duration;
    assert_eq!(parse_duration("8s").unwrap(), Duration::from_secs(8));
    assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
    assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
    assert_eq!(parse_duration("200ms").unwrap(), Duration::from_millis(200));
}

/// Issue 32 item 9: `check --timeout 3s` ran 6-7 s against a node that
/// never answers (the timeout's clock started after the first poll, which
/// waited out the poller's own request timeout). The whole run is now
/// bounded by the timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_timeout_bounds_the_whole_run_against_a_node_that_never_answers() {
    // Accepts connections and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming().flatten() {
            held.push(stream);
        }
    });
    let started = std::time::Instant::now();
    let (code, out, err) = run(vec![
        "check".into(),
        "--node".into(),
        format!("http://{addr}"),
        "--soak".into(),
        "1s".into(),
        "--timeout".into(),
        "3s".into(),
        "--interval".into(),
        "1s".into(),
    ])
    .await;
    let took = started.elapsed();
    println!("check --timeout 3s against a silent node: {took:?}, exit {code}");
    assert_eq!(code, 1, "{out}\n{err}");
    assert!(
        took < std::time::Duration::from_millis(4_000),
        "check --timeout 3s took {took:?}\n{out}"
    );
}
