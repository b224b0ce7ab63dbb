//! The gate-configuration reader (`--gate-config` files in JSON and YAML,
//! the per-instance annotation) over arbitrary text: no panic; an accepted
//! configuration passes the gate's validation; a document accepted as JSON
//! has no repeated key (serde_json, which keeps the last of two, reads the
//! same value once a leading byte-order mark is skipped, as the reader does) and gives the same configuration through the annotation's
//! path and after a round trip through its own serialisation.
#![no_main]

use kura_agent::cli::gate_file;
use kura_agent::engine::instance_gate_config;
use kura_agent::gate_text::{ConfigFormat, read_document};
use kura_gate::GateConfig;
use libfuzzer_sys::fuzz_target;
use std::path::Path;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(file) = gate_file::parse(Path::new("gate.yaml"), text) {
        assert!(
            file.config.validate().is_ok(),
            "accepted from YAML: {:?}",
            file.config
        );
    }
    let from_json = gate_file::parse(Path::new("gate.json"), text);
    let annotation = instance_gate_config(&GateConfig::default(), text);
    match (&from_json, &annotation) {
        (Ok(file), Ok(config)) => {
            assert_eq!(&file.config, config, "file and annotation disagree");
            assert!(config.validate().is_ok(), "accepted from JSON: {config:?}");
            let strict = read_document(text, ConfigFormat::Json).expect("accepted");
            // The strict reader skips a leading byte-order mark; serde_json refuses it.
            let unmarked = text.strip_prefix('\u{FEFF}').unwrap_or(text);
            let lenient: serde_json::Value = serde_json::from_str(unmarked).expect("JSON");
            assert_eq!(strict, lenient, "a repeated key was accepted");
            let again = serde_json::to_string(config).expect("serialise");
            assert_eq!(
                instance_gate_config(&GateConfig::default(), &again).as_ref(),
                Ok(config),
                "round trip"
            );
        }
        (Err(_), Err(_)) => {}
        _ => panic!("file {from_json:?} and annotation {annotation:?} disagree"),
    }
});
