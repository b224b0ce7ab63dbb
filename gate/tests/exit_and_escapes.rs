//! `kura-gate replay` as a hostile environment meets it (issue 44 items 8
//! and 9): output that cannot be written exits 3, never 1 (which means
//! "disagrees" or "differs"), and control characters of a `--gate-config`
//! key reach the terminal escaped.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn timeline(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("../testdata/timeline/{name}"))
        .to_str()
        .unwrap()
        .to_owned()
}

fn kura_gate(args: &[&str], stdout: Stdio) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_kura-gate"))
        .arg("replay")
        .args(args)
        .stdout(stdout)
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code().unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

#[test]
fn output_that_cannot_be_written_exits_3() {
    let soaks = timeline("soaks.json");
    let tampered = timeline("tampered.json");
    let loose = timeline("looser-outbox.gate.json");
    for args in [
        vec![soaks.as_str()],
        vec!["--agent-view", tampered.as_str()],
        vec!["--gate-config", loose.as_str(), "--diff", soaks.as_str()],
    ] {
        // A full disk.
        let full = std::fs::File::create("/dev/full").unwrap();
        let (code, err) = kura_gate(&args, Stdio::from(full));
        assert_eq!(code, 3, "{args:?} > /dev/full: {err}");
        assert!(err.contains("cannot write output"), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        // A closed pipe.
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let (code, err) = kura_gate(&args, Stdio::from(writer));
        assert_eq!(code, 3, "{args:?} | (closed): {err}");
        assert!(err.contains("cannot write output"), "{err}");
    }
    // The codes 1 stays for: a disagreement, written out.
    let (code, err) = kura_gate(&["--agent-view", &tampered], Stdio::null());
    assert_eq!(code, 1, "{err}");
}

#[test]
fn control_characters_of_a_configuration_key_are_printed_escaped() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("gate-config-escapes");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("evil.json");
    // An escape sequence, a bell, a carriage return and a bidirectional
    // override in a key (JSON escapes: the file itself is plain text).
    std::fs::write(
        &file,
        r#"{"\u001b[2J\u001b[31mfdTimeoutBand\u0007\r\u202e": 1}"#,
    )
    .unwrap();
    let (code, err) = kura_gate(
        &[
            "--gate-config",
            file.to_str().unwrap(),
            &timeline("soaks.json"),
        ],
        Stdio::null(),
    );
    assert_eq!(code, 2, "{err}");
    let line = err.strip_suffix('\n').unwrap_or(&err);
    assert!(
        !line.chars().any(|c| c.is_control() || c == '\u{202e}'),
        "raw control characters reach the terminal: {err:?}"
    );
    // (A line break in a key is a space already, to keep the error one line.)
    assert!(
        line.contains(r"\u{1b}[2J\u{1b}[31mfdTimeoutBand\u{7} \u{202e}"),
        "{err:?}"
    );
}

#[test]
fn the_help_documents_exit_3() {
    for args in [&["--help"][..], &["replay", "--help"]] {
        let out = Command::new(env!("CARGO_BIN_EXE_kura-gate"))
            .args(args)
            .output()
            .unwrap();
        let help = String::from_utf8(out.stdout).unwrap().replace('\n', " ");
        assert!(
            help.contains("3 when the output cannot be written"),
            "{args:?}: {help}"
        );
    }
}
