//! `kura-agent timelines` against a hostile directory and a hostile agent
//! (issue 44 items 2, 3, 6 and 7): links and a FIFO planted under the
//! target file names are replaced, never written through or opened;
//! instances never share a file; a 253-character name is exported.

use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use kura_agent::tools::timelines::{
    FetchError, Fetched, MAX_FILE_NAME, TimelinesArgs, fetch_all, timeline_file,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// An exported timeline (no ticks: only its shape matters here), answered
/// for every instance.
static TIMELINE: LazyLock<Vec<u8>> = LazyLock::new(|| {
    serde_json::to_vec(&serde_json::json!({
        "config": {
            "soakSeconds": [300], "waveDeadlineSeconds": 3600, "maxSampleAgeSeconds": 180,
            "futureSkewSeconds": 60, "outboxBandPercent": 10, "outboxBandMinimum": 50,
            "replicationLagBandPercent": 10, "replicationLagBandMinimum": 50,
            "fdTimeoutBand": 0, "peerFailureBandPercent": 10, "peerFailureBandMinimum": 25,
            "backlogDrainWindowSeconds": 0
        },
        "instance": {
            "namespace": "kura", "name": "acme", "targetImage": "ghcr.io/tuist/kura:2",
            "baselineImage": "ghcr.io/tuist/kura:1"
        },
        "window": {
            "from": "2026-07-21T09:59:30Z", "to": "2026-07-21T10:06:00Z",
            "droppedTicks": 0, "complete": true
        },
        "ticks": []
    }))
    .expect("timeline")
});

/// An agent answering `/debug/instances` with `listed` (namespace, name)
/// and every timeline with [`TIMELINE`].
async fn agent(listed: Vec<(String, String)>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let list: Vec<serde_json::Value> = listed
        .iter()
        .map(|(ns, name)| serde_json::json!({"namespace": ns, "name": name}))
        .collect();
    let list = Arc::new(serde_json::to_vec(&list).expect("list"));
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let list = Arc::clone(&list);
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&head);
                let path = text.split(' ').nth(1).unwrap_or_default();
                let body: &[u8] = if path == "/debug/instances" {
                    &list
                } else {
                    &TIMELINE
                };
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
                let _ = stream.write_all(body).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    format!("http://{addr}")
}

/// A fresh directory under the target's temporary directory.
fn fresh(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    dir
}

fn args(from: String, out: &Path) -> TimelinesArgs {
    TimelinesArgs {
        from,
        out: out.to_path_buf(),
        namespace: None,
        concurrency: 4,
        timeout: Duration::from_secs(3),
        body_limit: 1024 * 1024,
    }
}

/// Runs `fetch_all`; a run that has not ended after 20 s hung (on a FIFO:
/// `fifos` are opened for reading then, so it ends and the test fails
/// instead of hanging).
async fn fetch_or_hang(args: &TimelinesArgs, fifos: &[PathBuf]) -> Fetched {
    match tokio::time::timeout(Duration::from_secs(20), fetch_all(args)).await {
        Ok(fetched) => fetched.expect("fetched"),
        Err(_) => {
            for fifo in fifos {
                let _ = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(fifo);
            }
            panic!("kura-agent timelines hung for 20 s (--timeout is 3 s)");
        }
    }
}

fn is_regular_file(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_file())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_and_fifos_planted_in_the_directory_are_replaced_never_followed() {
    let root = fresh("timelines-planted");
    let out = root.join("out");
    let outside = root.join("outside");
    std::fs::create_dir_all(&out).expect("out");
    std::fs::create_dir_all(&outside).expect("outside");
    let names = ["symlink", "hardlink", "dangling", "fifo"];
    let listed = names
        .iter()
        .map(|n| ("ns".to_owned(), (*n).to_owned()))
        .collect();
    let from = agent(listed).await;
    let target = |name: &str| timeline_file(&out, "ns", name);

    let victim = outside.join("victim");
    std::fs::write(&victim, "precious").expect("victim");
    std::os::unix::fs::symlink(&victim, target("symlink")).expect("symlink");
    let linked = outside.join("linked");
    std::fs::write(&linked, "precious too").expect("linked");
    std::fs::hard_link(&linked, target("hardlink")).expect("hard link");
    let created = outside.join("created");
    std::os::unix::fs::symlink(&created, target("dangling")).expect("dangling symlink");
    let fifo = target("fifo");
    let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o644) }, 0, "mkfifo");
    assert!(
        std::fs::symlink_metadata(&fifo)
            .expect("fifo")
            .file_type()
            .is_fifo()
    );

    let fetched = fetch_or_hang(&args(from, &out), std::slice::from_ref(&fifo)).await;
    println!("{:#?}", fetched.lines);
    assert_eq!(
        (fetched.written, fetched.failed),
        (names.len(), 0),
        "{:?}",
        fetched.lines
    );
    assert_eq!(
        std::fs::read_to_string(&victim).expect("victim"),
        "precious",
        "written through a symlink"
    );
    assert_eq!(
        std::fs::read_to_string(&linked).expect("linked"),
        "precious too",
        "written through a hard link"
    );
    assert!(
        !created.exists(),
        "a dangling symlink created a file outside"
    );
    for name in names {
        let file = target(name);
        assert!(
            is_regular_file(&file),
            "{} is not a regular file",
            file.display()
        );
        assert_eq!(std::fs::read(&file).expect("read"), *TIMELINE, "{name}");
    }
    let left: Vec<_> = std::fs::read_dir(&out)
        .expect("out")
        .filter_map(Result::ok)
        .map(|e| e.file_name())
        .collect();
    assert_eq!(left.len(), names.len(), "temporary files left: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instances_never_share_a_file_and_long_names_are_exported() {
    let out = fresh("timelines-names");
    let long = format!("{}.{}", "a".repeat(126), "b".repeat(126));
    let long_too = format!("{}c", &long[..252]);
    assert_eq!((long.len(), long_too.len()), (253, 253));
    let listed = vec![
        ("a.b".to_owned(), "c".to_owned()),
        ("a".to_owned(), "b.c".to_owned()),
        ("a".to_owned(), "b.c".to_owned()),
        ("ns".to_owned(), long.clone()),
        ("ns".to_owned(), long_too.clone()),
    ];
    let from = agent(listed).await;
    let fetched = fetch_or_hang(&args(from, &out), &[]).await;
    println!("{:#?}", fetched.lines);
    // `a.b/c` is no Kubernetes instance (a namespace has no dot) and `a/b.c`
    // listed twice is written once: each file holds one instance.
    assert_eq!(
        (fetched.written, fetched.failed),
        (3, 2),
        "{:?}",
        fetched.lines
    );
    assert!(
        fetched
            .lines
            .iter()
            .any(|l| l.starts_with("failed   a.b/c: not a Kubernetes name")),
        "{:?}",
        fetched.lines
    );
    let mut files: Vec<String> = std::fs::read_dir(&out)
        .expect("out")
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files.len(), 3, "{files:?}");
    for file in &files {
        assert!(file.len() <= MAX_FILE_NAME, "{file}");
        assert_eq!(std::fs::read(out.join(file)).expect("read"), *TIMELINE);
    }
    assert!(is_regular_file(&timeline_file(&out, "a", "b.c")));
    assert!(is_regular_file(&timeline_file(&out, "ns", &long)));
    assert!(is_regular_file(&timeline_file(&out, "ns", &long_too)));
    assert_ne!(
        timeline_file(&out, "ns", &long),
        timeline_file(&out, "ns", &long_too)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invalid_or_empty_port_in_from_is_refused() {
    // Issue 44 item 4: these fetched from port 80 and exited 0.
    let out = fresh("timelines-ports");
    for from in [
        "http://127.0.0.1:99999",
        "http://127.0.0.1:65536",
        "http://127.0.0.1:",
        "http://127.0.0.1:0",
    ] {
        match fetch_all(&args(from.to_owned(), &out)).await {
            Err(FetchError::Url(reason)) => {
                assert!(reason.contains("port"), "{from}: {reason}");
            }
            other => panic!("{from}: {other:?}"),
        }
    }
}
