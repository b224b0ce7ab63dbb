//! The strict JSON reader over arbitrary bytes: no panic; whatever it
//! accepts, serde_json accepts too and reads the same value (strict only
//! refuses more: repeated keys, a byte-order mark).
#![no_main]

use kura_schemas::strict_json;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(strict) = strict_json::from_slice(data) {
        let lenient: serde_json::Value =
            serde_json::from_slice(data).expect("serde_json refuses what strict_json accepted");
        assert_eq!(strict, lenient);
    }
    let _ = strict_json::from_document(data);
});
