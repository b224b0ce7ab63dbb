//! The committed CRD and JSON Schemas must be exactly what the code
//! generates (regenerate with `cargo run -p kura-schemas --bin crdgen`).

use std::path::PathBuf;

#[test]
fn committed_artifacts_match_the_code() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    for (rel, content) in kura_schemas::generated::artifacts().unwrap() {
        let committed = std::fs::read_to_string(root.join(&rel))
            .unwrap_or_else(|e| panic!("{rel} missing ({e}); run crdgen"));
        assert!(
            committed == content,
            "{rel} differs from the generated one; run `cargo run -p kura-schemas --bin crdgen`"
        );
    }
}

#[test]
fn crd_declares_both_agent_status_fields_and_the_status_subresource() {
    let crd: serde_json::Value =
        serde_yaml::from_str(&kura_schemas::generated::crd_yaml().unwrap()).unwrap();
    let v = &crd["spec"]["versions"][0];
    assert_eq!(v["name"], "v1alpha1");
    assert!(v["subresources"]["status"].is_object());
    let status = &v["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
    for f in ["rolloutHealth", "rolloutGate", "phase", "observedImage"] {
        assert!(status[f].is_object(), "status.{f} declared");
    }
    assert_eq!(crd["spec"]["names"]["shortNames"][0], "kura");
    // `kubectl get tuist` lists them (issue 31).
    assert_eq!(crd["spec"]["names"]["categories"][0], "tuist");
    let columns: Vec<&str> = v["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    for c in [
        "Ready",
        "Serving",
        "Sampled",
        "Expected",
        "Pressure",
        "RolloutHealthy",
        "Verdict",
        "Signal",
        "Sample-Age",
    ] {
        assert!(columns.contains(&c), "printer column {c}");
    }
}

/// Every integer of the CRD is declared as what the API server stores
/// (int64, or int32 for the small ones), never as an unsigned format it
/// does not know; the same for the JSON Schemas.
#[test]
fn every_integer_is_declared_as_stored() {
    fn walk(path: &str, v: &serde_json::Value, seen: &mut Vec<(String, String)>) {
        match v {
            serde_json::Value::Object(o) => {
                let is_integer = match o.get("type") {
                    Some(serde_json::Value::String(t)) => t == "integer",
                    Some(serde_json::Value::Array(ts)) => ts.iter().any(|t| t == "integer"),
                    _ => false,
                };
                if is_integer {
                    let format = o.get("format").and_then(|f| f.as_str()).unwrap_or("");
                    seen.push((path.to_owned(), format.to_owned()));
                }
                for (k, child) in o {
                    walk(&format!("{path}/{k}"), child, seen);
                }
            }
            serde_json::Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    walk(&format!("{path}/{i}"), child, seen);
                }
            }
            _ => {}
        }
    }
    let crd: serde_json::Value =
        serde_yaml::from_str(&kura_schemas::generated::crd_yaml().unwrap()).unwrap();
    let mut seen = Vec::new();
    walk("crd", &crd["spec"]["versions"][0]["schema"], &mut seen);
    for (rel, content) in kura_schemas::generated::artifacts().unwrap() {
        if rel.ends_with(".json") {
            walk(&rel, &serde_json::from_str(&content).unwrap(), &mut seen);
        }
    }
    let bad: Vec<_> = seen
        .iter()
        .filter(|(_, f)| f != "int64" && f != "int32")
        .collect();
    assert!(bad.is_empty(), "integers not declared int64/int32: {bad:?}");
    let fd = seen
        .iter()
        .find(|(p, _)| p.ends_with("rolloutHealth/properties/fdTimeoutCount"))
        .expect("rolloutHealth.fdTimeoutCount in the CRD");
    assert_eq!(fd.1, "int64");
    assert!(seen.len() >= 60, "integers seen: {}", seen.len());
}

/// `status.conditions` is a list map keyed by `type` (server-side apply
/// then gives each writer the entries of its own types) with the standard
/// condition shape.
#[test]
fn crd_declares_conditions_as_a_list_map_keyed_by_type() {
    let crd: serde_json::Value =
        serde_yaml::from_str(&kura_schemas::generated::crd_yaml().unwrap()).unwrap();
    let conditions = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
        ["properties"]["conditions"];
    assert_eq!(conditions["type"], "array", "{conditions}");
    assert_eq!(conditions["x-kubernetes-list-type"], "map", "{conditions}");
    assert_eq!(
        conditions["x-kubernetes-list-map-keys"],
        serde_json::json!(["type"])
    );
    let item = &conditions["items"];
    let mut required: Vec<&str> = item["required"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    required.sort_unstable();
    assert_eq!(
        required,
        ["lastTransitionTime", "message", "reason", "status", "type"]
    );
    assert_eq!(item["properties"]["observedGeneration"]["type"], "integer");
    assert_eq!(
        item["properties"]["lastTransitionTime"]["format"],
        "date-time"
    );
}

#[test]
fn every_signal_has_a_camel_case_reason() {
    for s in kura_schemas::Signal::ALL {
        let camel: String = s
            .as_str()
            .split('_')
            .map(|w| {
                let mut c = w.chars();
                c.next()
                    .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                    .unwrap_or_default()
            })
            .collect();
        assert_eq!(s.reason(), camel, "{s}");
    }
}
