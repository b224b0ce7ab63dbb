//! The one strict reader of a gate configuration's text: the
//! `--gate-config` file of `run` and `check` (JSON or YAML,
//! [`crate::cli::gate_file`]) and the per-instance annotation (JSON,
//! [`crate::engine::instance_gate_config`]): kura-gate's own
//! ([`kura_gate::config_file::read_document`]), so the agent and `kura-gate
//! replay` read a configuration alike. Its value then goes through the
//! gate's one configuration parser ([`kura_gate::parse_config_over`]).

pub use kura_gate::config_file::{ConfigFormat, read_document};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeated_key_is_refused_in_json_and_yaml_at_any_depth() {
        for (text, format) in [
            (
                r#"{"fdTimeoutBand": 0, "fdTimeoutBand": 1000000}"#,
                ConfigFormat::Json,
            ),
            (
                r#"{"fdTimeoutBand": 0, "fdTimeoutBand": 1000000}"#,
                ConfigFormat::Yaml,
            ),
            (
                "fdTimeoutBand: 0\nfdTimeoutBand: 1000000\n",
                ConfigFormat::Yaml,
            ),
            ("soakSeconds: [1]\nx:\n  a: 1\n  a: 2\n", ConfigFormat::Yaml),
        ] {
            let (_, reason) = read_document(text, format).expect_err(text);
            assert!(
                reason.contains("appears more than once"),
                "{text}: {reason}"
            );
        }
    }

    #[test]
    fn yaml_infinities_and_nan_are_refused_not_read_as_null() {
        for text in [
            "fdTimeoutBand: .inf\n",
            "fdTimeoutBand: -.inf\n",
            "fdTimeoutBand: .nan\n",
            "soakSeconds: [.NaN]\n",
        ] {
            let (format, reason) = read_document(text, ConfigFormat::Yaml).expect_err(text);
            assert_eq!(format, "YAML");
            assert!(reason.contains("not a finite number"), "{text}: {reason}");
        }
        // A plain document reads as before.
        assert_eq!(
            read_document("fdTimeoutBand: 3\nsoakSeconds: [60]\n", ConfigFormat::Yaml).unwrap(),
            serde_json::json!({"fdTimeoutBand": 3, "soakSeconds": [60]})
        );
    }

    #[test]
    fn a_leading_byte_order_mark_is_skipped_by_the_file_and_the_annotation() {
        // The fuzz target's find (testdata/gate-config/byte-order-mark.json):
        // a mark, `{}`, CR and LF line ends.
        let text = "\u{FEFF}{}\r\n\r\r\n\r\n\r\r";
        assert_eq!(
            read_document(text, ConfigFormat::Json).unwrap(),
            serde_json::json!({})
        );
        let file = crate::cli::gate_file::parse(std::path::Path::new("gate.json"), text).unwrap();
        let annotation =
            crate::engine::instance_gate_config(&kura_gate::GateConfig::default(), text).unwrap();
        assert_eq!(file.config, annotation);
        assert_eq!(annotation, kura_gate::GateConfig::default());
        // A mark anywhere else is not skipped.
        assert!(read_document("{}\u{FEFF}", ConfigFormat::Json).is_err());
    }
}
