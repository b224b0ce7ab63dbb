//! The one reader of a gate configuration file, for every command that
//! takes one: the agent's `run` and `check` (`--gate-config`,
//! `--shadow-gate-config`), its demo and fleet-load side, and `kura-gate
//! replay --gate-config`. The file holds the camelCase keys of
//! [`GateConfig`] (the `config` object of a replay document), every key
//! optional, unknown keys refused, in JSON (a name ending in `.json`) or
//! YAML (any other name; a JSON document is YAML too), read up to
//! [`MAX_CONFIG_FILE_BYTES`]. Its text goes through [`read_document`] (the
//! strict reader, also of the agent's per-instance annotation) and the
//! gate's one configuration parser
//! ([`parse_config_over`](crate::parse_config_over)); a refusal is one
//! line naming the file, the key and the reason ([`ConfigFileError`]).
//! The bindings' configuration documents are read here too
//! ([`parse_config_json`], strict JSON, `null` the defaults).

use std::io::Read as _;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::config::GateConfig;
use crate::document::{DocumentError, config_error_line, parse_config_over};

/// The largest gate configuration file read, in bytes.
pub const MAX_CONFIG_FILE_BYTES: u64 = 64 * 1024;

/// How a gate configuration's text is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigFormat {
    /// JSON (a file named `*.json`, the per-instance annotation).
    Json,
    /// YAML (any other file name).
    Yaml,
}

impl ConfigFormat {
    /// The format of a file named `path`: JSON for a `.json` extension (in
    /// any case), else YAML.
    pub fn of_path(path: &Path) -> Self {
        if path
            .extension()
            .is_some_and(|e| e.eq_ignore_ascii_case("json"))
        {
            ConfigFormat::Json
        } else {
            ConfigFormat::Yaml
        }
    }
}

/// The one strict reader of a gate configuration's text, for the files
/// (JSON or YAML) and the per-instance annotation (JSON) alike, with the
/// replay document's rules (`kura_schemas::strict_json`): a key repeated at
/// any depth is refused (serde's readers keep the last one, so
/// `{"fdTimeoutBand": 0, "fdTimeoutBand": 1000000}` would widen the band),
/// and so is a number that is not finite (YAML's `.inf`, `.nan`, which
/// would otherwise read as null, the default). The error is the format's
/// name and the reason with its position.
pub fn read_document(text: &str, format: ConfigFormat) -> Result<Value, (&'static str, String)> {
    match format {
        ConfigFormat::Json => {
            kura_schemas::strict_json::document_from_str(text).map_err(|e| ("JSON", e.to_string()))
        }
        ConfigFormat::Yaml => {
            kura_schemas::strict_json::value_from(serde_yaml::Deserializer::from_str(text))
                .map_err(|e| ("YAML", e.to_string()))
        }
    }
}

/// A gate configuration read from a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigFile {
    /// The configuration: the file's keys over the defaults.
    pub config: GateConfig,
    /// The keys the file sets (not null), in file order.
    pub keys: Vec<String>,
}

impl ConfigFile {
    /// Whether the file sets `key`.
    pub fn sets(&self, key: &str) -> bool {
        self.keys.iter().any(|k| k == key)
    }
}

/// Why a gate configuration file was refused; its display is the one line
/// a command prints before exiting 2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigFileError {
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
pub fn load(path: &Path) -> Result<ConfigFile, ConfigFileError> {
    let read_error = |reason: String| ConfigFileError::Read {
        path: path.to_owned(),
        reason,
    };
    let file = std::fs::File::open(path).map_err(|e| read_error(e.to_string()))?;
    let mut text = String::new();
    file.take(MAX_CONFIG_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(|e| read_error(e.to_string()))?;
    if text.len() as u64 > MAX_CONFIG_FILE_BYTES {
        return Err(read_error(format!(
            "larger than {MAX_CONFIG_FILE_BYTES} bytes"
        )));
    }
    parse(path, &text)
}

/// Checks the text of a gate configuration file named `path` (its name
/// decides JSON or YAML, [`ConfigFormat::of_path`]).
pub fn parse(path: &Path, text: &str) -> Result<ConfigFile, ConfigFileError> {
    let value = read_document(text, ConfigFormat::of_path(path)).map_err(|(format, reason)| {
        ConfigFileError::Syntax {
            path: path.to_owned(),
            format,
            reason: one_line(&reason),
        }
    })?;
    over_defaults(value).map_err(|reason| ConfigFileError::Invalid {
        path: path.to_owned(),
        reason,
    })
}

/// A configuration document's value over the defaults, or the refusal's
/// one line (`key K: reason`, or why the document as a whole is refused).
fn over_defaults(value: Value) -> Result<ConfigFile, String> {
    let config =
        parse_config_over(&GateConfig::default(), &value).map_err(|e| match (&e, &value) {
            (DocumentError::Field { field, .. }, Value::Null) if field == "(config)" => {
                "empty: expected an object of gate settings (write {} for the defaults)".to_owned()
            }
            _ => config_error_line(&e),
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
    Ok(ConfigFile { config, keys })
}

/// Parses a configuration document on its own, as the bindings hand it
/// in (the C ABI, the Elixir NIF): the replay document's `config` object
/// (every key optional, unknown keys refused), strict JSON; `null` is the
/// default configuration.
pub fn parse_config_json(text: &str) -> Result<GateConfig, DocumentError> {
    match crate::document::json_value(text)? {
        Value::Null => Ok(GateConfig::default()),
        value => crate::document::parse_config_value(&value),
    }
}

fn one_line(text: &str) -> String {
    text.replace(['\n', '\r'], " ")
}
