//! `--gate-config FILE` of `run` and `check` (`KURA_AGENT_GATE_CONFIG`):
//! the gate's settings in JSON or YAML, the camelCase keys of
//! [`GateConfig`] (the `config` object of `kura-gate replay`), every key
//! optional, unknown keys refused. The document goes through the gate's one
//! parser and validator ([`kura_gate::parse_config_over`]); a file that
//! does not pass it stops the command at start-up (exit 2) with one line
//! naming the file, the key and the reason.
//!
//! A file whose name ends in `.json` is read as JSON, any other as YAML (a
//! JSON document is YAML too). It is read up to [`MAX_GATE_FILE_BYTES`].

use std::io::Read as _;
use std::path::{Path, PathBuf};

use kura_gate::GateConfig;
use serde_json::Value;

use crate::engine::config_error_text;
use crate::gate_text::{ConfigFormat, read_document};

/// The largest gate configuration file read, in bytes.
pub const MAX_GATE_FILE_BYTES: u64 = 64 * 1024;

/// A gate configuration read from a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateFile {
    /// The configuration: the file's keys over the defaults.
    pub config: GateConfig,
    /// The keys the file sets (not null), in file order.
    pub keys: Vec<String>,
}

impl GateFile {
    /// Whether the file sets `key`.
    pub fn sets(&self, key: &str) -> bool {
        self.keys.iter().any(|k| k == key)
    }
}

/// Why a gate configuration file was refused; its display is the one line
/// printed before exiting 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GateFileError {
    /// The file could not be read.
    #[error("gate config {}: cannot read: {reason}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// Not JSON or not YAML at all.
    #[error("gate config {}: not valid {format}: {reason}", path.display())]
    Syntax {
        /// The file.
        path: PathBuf,
        /// `JSON` or `YAML`.
        format: &'static str,
        /// The parser's reason (with its line and column).
        reason: String,
    },
    /// A key or the document's shape refused by the gate's parser.
    #[error("gate config {}: {reason}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// `key K: reason`, or why the document as a whole is refused.
        reason: String,
    },
}

/// Reads and checks the gate configuration in `path`.
pub fn load(path: &Path) -> Result<GateFile, GateFileError> {
    let read_error = |reason: String| GateFileError::Read {
        path: path.to_owned(),
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| read_error(e.to_string()))?;
    let mut text = String::new();
    file.take(MAX_GATE_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| read_error(e.to_string()))?;
    if text.len() as u64 > MAX_GATE_FILE_BYTES {
        return Err(read_error(format!(
            "larger than {MAX_GATE_FILE_BYTES} bytes"
        )));
    }
    parse(path, &text)
}

/// Checks the text of a gate configuration file named `path` (its name
/// decides JSON or YAML).
pub fn parse(path: &Path, text: &str) -> Result<GateFile, GateFileError> {
    let json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    let syntax = |format: &'static str, reason: String| GateFileError::Syntax {
        path: path.to_owned(),
        format,
        reason: one_line(&reason),
    };
    let format = if json {
        ConfigFormat::Json
    } else {
        ConfigFormat::Yaml
    };
    let value = read_document(text, format).map_err(|(format, reason)| syntax(format, reason))?;
    let config = kura_gate::parse_config_over(&GateConfig::default(), &value).map_err(|e| {
        GateFileError::Invalid {
            path: path.to_owned(),
            reason: match (&e, &value) {
                (kura_gate::DocumentError::Field { field, .. }, Value::Null)
                    if field == "(config)" =>
                {
                    "empty: expected an object of gate settings (write {} for the defaults)"
                        .to_owned()
                }
                _ => config_error_text(&e),
            },
        }
    })?;
    let keys = value
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, _)| k.clone())
                .collect()
        })
        .unwrap_or_default();
    Ok(GateFile { config, keys })
}

fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(text: &str) -> Result<GateFile, GateFileError> {
        parse(Path::new("/etc/kura/gate.yaml"), text)
    }

    fn json(text: &str) -> Result<GateFile, GateFileError> {
        parse(Path::new("/etc/kura/gate.json"), text)
    }

    #[test]
    fn yaml_and_json_read_the_same_configuration() {
        let from_yaml =
            yaml("fdTimeoutBand: 5\nsoakSeconds: [60, 30]\noutboxBandMinimum: null\n").unwrap();
        let from_json = json(r#"{"fdTimeoutBand": 5, "soakSeconds": [60, 30]}"#).unwrap();
        assert_eq!(from_yaml.config, from_json.config);
        assert_eq!(from_yaml.config.fd_timeout_band, 5);
        assert_eq!(from_yaml.config.soak_seconds, [60, 30]);
        assert_eq!(
            from_yaml.config.outbox_band_minimum, 50,
            "null keeps the default"
        );
        assert_eq!(from_yaml.keys, ["fdTimeoutBand", "soakSeconds"]);
        assert!(from_yaml.sets("soakSeconds") && !from_yaml.sets("outboxBandMinimum"));
        assert_eq!(yaml("{}").unwrap().config, GateConfig::default());
        // A JSON document is YAML too.
        assert_eq!(
            parse(
                Path::new("gate"),
                r#"{"fdTimeoutBand": 5, "soakSeconds": [60, 30]}"#
            )
            .unwrap()
            .config,
            from_json.config
        );
    }

    #[test]
    fn every_refusal_is_one_line_naming_the_file_the_key_and_the_reason() {
        for (result, want) in [
            (
                yaml("fdTimeoutBands: 3\n"),
                "gate config /etc/kura/gate.yaml: key fdTimeoutBands: unknown key (the keys are soakSeconds, waveDeadlineSeconds,",
            ),
            (
                yaml("fdTimeoutBand: three\n"),
                "gate config /etc/kura/gate.yaml: key fdTimeoutBand: expected a non-negative integer, got \"three\"",
            ),
            (
                yaml("soakSeconds: []\n"),
                "gate config /etc/kura/gate.yaml: key soakSeconds: must list at least one value",
            ),
            (
                yaml("outboxBandPercent: 5000\n"),
                "gate config /etc/kura/gate.yaml: key outboxBandPercent: 5000 is above the limit of 1000",
            ),
            (
                json(r#"{"peerFailureBandPercent": 1001}"#),
                "gate config /etc/kura/gate.json: key peerFailureBandPercent: 1001 is above the limit of 1000",
            ),
            (
                json(r#"{"maxSampleAgeSeconds": 0}"#),
                "gate config /etc/kura/gate.json: key maxSampleAgeSeconds: must be at least 1",
            ),
            (
                json(r#"{"fdTimeoutBand": 3,}"#),
                "gate config /etc/kura/gate.json: not valid JSON: trailing comma at line 1 column 21",
            ),
            (
                yaml("fdTimeoutBand: [\n"),
                "gate config /etc/kura/gate.yaml: not valid YAML:",
            ),
            (
                yaml("- 1\n- 2\n"),
                "gate config /etc/kura/gate.yaml: expected an object, got [1,2]",
            ),
            (
                yaml(""),
                "gate config /etc/kura/gate.yaml: empty: expected an object of gate settings",
            ),
        ] {
            let message = result.expect_err(want).to_string();
            assert!(message.starts_with(want), "{message}\nwanted: {want}");
            assert!(!message.contains('\n'), "{message}");
        }
    }

    #[test]
    fn repeated_keys_and_yaml_infinities_are_refused_in_files() {
        // Issue 32 item 3: the last of two keys won, so a repeated
        // fdTimeoutBand widened the band; `.inf` read as null, the default.
        for (result, want) in [
            (
                json(r#"{"fdTimeoutBand": 0, "fdTimeoutBand": 1000000}"#),
                "gate config /etc/kura/gate.json: not valid JSON: key \"fdTimeoutBand\" appears more than once in one object at line 1 column 36",
            ),
            (
                yaml("fdTimeoutBand: 0\nfdTimeoutBand: 1000000\n"),
                "gate config /etc/kura/gate.yaml: not valid YAML: key \"fdTimeoutBand\" appears more than once",
            ),
            (
                yaml("outboxBandMinimum: .inf\n"),
                "gate config /etc/kura/gate.yaml: not valid YAML: outboxBandMinimum: inf is not a finite number",
            ),
            (
                yaml("peerFailureBandMinimum: .nan\n"),
                "gate config /etc/kura/gate.yaml: not valid YAML: peerFailureBandMinimum: NaN is not a finite number",
            ),
        ] {
            let message = result.expect_err(want).to_string();
            assert!(message.starts_with(want), "{message}\nwanted: {want}");
            assert!(!message.contains('\n'), "{message}");
        }
    }

    #[test]
    fn missing_and_oversized_files_are_refused() {
        let message = load(Path::new("/nonexistent/gate.yaml"))
            .expect_err("missing")
            .to_string();
        assert!(
            message.starts_with("gate config /nonexistent/gate.yaml: cannot read:"),
            "{message}"
        );
        let dir = std::env::temp_dir().join(format!("kura-gate-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let big = dir.join("big.yaml");
        std::fs::write(&big, " ".repeat(MAX_GATE_FILE_BYTES as usize + 1)).unwrap();
        let message = load(&big).expect_err("too big").to_string();
        assert!(message.contains("larger than 65536 bytes"), "{message}");
        let good = dir.join("good.json");
        std::fs::write(&good, r#"{"fdTimeoutBand": 2}"#).unwrap();
        assert_eq!(load(&good).unwrap().config.fd_timeout_band, 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
