//! `--gate-config FILE` and `--shadow-gate-config FILE` of `run`
//! ([`GateArgs`]; `check` takes `--gate-config` too): the gate's settings
//! in JSON or YAML, the camelCase keys of [`GateConfig`] (the `config`
//! object of `kura-gate replay`), every key optional, unknown keys refused.
//! The files are read by kura-gate's one configuration file reader
//! ([`kura_gate::config_file`], which `kura-gate replay --gate-config` and,
//! through the same parser, the bindings use too), once, at start-up
//! ([`GateArgs::load`]); a file that does not pass it stops the command at
//! start-up (exit 2) with one line naming the file, the key and the reason.
//!
//! A file whose name ends in `.json` is read as JSON, any other as YAML (a
//! JSON document is YAML too). It is read up to [`MAX_GATE_FILE_BYTES`].

use std::path::PathBuf;

use clap::Args;
use kura_gate::GateConfig;

pub use kura_gate::config_file::{
    ConfigFile as GateFile, ConfigFileError as GateFileError,
    MAX_CONFIG_FILE_BYTES as MAX_GATE_FILE_BYTES, load, parse,
};

/// The gate configuration files of `run`.
#[derive(Debug, Clone, Args)]
pub struct GateArgs {
    /// The gate's settings for every instance: a JSON (`.json`) or YAML
    /// file of `GateConfig` keys (camelCase, as in `kura-gate replay`'s
    /// `config`; every key optional, unknown keys refused). Without it the
    /// documented defaults apply. An instance's own
    /// `kura.tuist.dev/gate-config` annotation (a JSON object of the same
    /// keys) is merged over it for that instance only. `soakSeconds` and
    /// `waveDeadlineSeconds` are the orchestrator's: the agent publishes
    /// `healthySince` and never judges a wave.
    #[arg(long, env = "KURA_AGENT_GATE_CONFIG", value_name = "FILE")]
    pub gate_config: Option<PathBuf>,

    /// A candidate gate configuration (the same format as
    /// `--gate-config`, over the defaults) judged beside the live one on
    /// the same samples: every instance gets a second, shadow verdict
    /// (its annotation merged over this file, as the live one is over
    /// `--gate-config`), shown on the pages, in the verdict API under
    /// `shadow` and as `kura_instance_shadow_gate_*` series; it is never
    /// written to the status, a condition or an Event. Restarts start the
    /// shadow from the live verdict's baseline.
    #[arg(long, env = "KURA_AGENT_SHADOW_GATE_CONFIG", value_name = "FILE")]
    pub shadow_gate_config: Option<PathBuf>,
}

/// The gate configurations `run` judges with, read from their files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateConfigs {
    /// Every instance's: `--gate-config`'s file over the defaults, or the
    /// defaults.
    pub live: GateConfig,
    /// The shadow's: `--shadow-gate-config`'s file over the defaults;
    /// `None` without the flag.
    pub shadow: Option<GateConfig>,
}

impl GateArgs {
    /// Reads both files (each once): call at start-up only.
    pub fn load(&self) -> Result<GateConfigs, GateFileError> {
        let read = |path: &Option<PathBuf>| path.as_deref().map(load).transpose();
        Ok(GateConfigs {
            live: read(&self.gate_config)?.map_or_else(GateConfig::default, |f| f.config),
            shadow: read(&self.shadow_gate_config)?.map(|f| f.config),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

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
