#!/usr/bin/env python3
"""Turn a kube-apiserver's OpenAPI v2 document into standalone, strict JSON
Schemas in kubeconform's layout, so kubeconform can validate offline against
exactly the API server the tests run (built-in kinds and every CRD applied to
it, e.g. KuraInstance).

    kubectl get --raw /openapi/v2 > openapi.json
    scripts/k8s-json-schemas.py openapi.json OUT_DIR
    kubeconform -strict -schema-location 'OUT_DIR/{{ .ResourceKind }}{{ .KindSuffix }}.json' ...

One file per group/version/kind, named like kubeconform's KindSuffix:
`deployment-apps-v1.json`, `pod-v1.json`, `kuraInstance-kura-v1alpha1.json`
(lower-cased kind, first segment of the group, version). `$ref`s are inlined
(a recursive reference becomes `{}`); `int-or-string` becomes a oneOf; every
object schema with properties and no `additionalProperties` gets
`additionalProperties: false` (kubeconform's "-strict" flavour), unless it is
marked `x-kubernetes-preserve-unknown-fields`. Standard library only.
"""

import json
import os
import sys

REF_PREFIX = "#/definitions/"


def convert(schema, definitions, stack):
    """A copy of `schema` with references inlined and strictness added."""
    if isinstance(schema, list):
        return [convert(s, definitions, stack) for s in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref")
    if isinstance(ref, str) and ref.startswith(REF_PREFIX):
        name = ref[len(REF_PREFIX):]
        if name in stack or name not in definitions:
            return {}
        inlined = convert(definitions[name], definitions, stack | {name})
        # Sibling keywords (a description next to the $ref) are kept.
        for key, value in schema.items():
            if key != "$ref":
                inlined.setdefault(key, value)
        return inlined
    out = {}
    for key, value in schema.items():
        if key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: convert(v, definitions, stack) for k, v in value.items()}
        elif key == "x-kubernetes-group-version-kind":
            continue
        else:
            out[key] = convert(value, definitions, stack)
    if out.get("format") == "int-or-string":
        out.pop("type", None)
        out.pop("format", None)
        out["oneOf"] = [{"type": "string"}, {"type": "integer"}]
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def file_name(gvk):
    group = gvk.get("group", "")
    suffix = "-" + group.split(".")[0].lower() if group else ""
    return f"{gvk['kind'].lower()}{suffix}-{gvk['version'].lower()}.json"


def main(argv):
    if len(argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        document = json.load(f)
    definitions = document.get("definitions")
    if not isinstance(definitions, dict) or not definitions:
        sys.stderr.write(f"{argv[1]}: no OpenAPI v2 definitions\n")
        return 1
    out_dir = argv[2]
    os.makedirs(out_dir, exist_ok=True)
    written = 0
    for name, schema in sorted(definitions.items()):
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            if gvk["kind"].endswith("List") or gvk["kind"] in ("Status", "WatchEvent", "DeleteOptions"):
                continue
            standalone = convert(schema, definitions, {name})
            with open(os.path.join(out_dir, file_name(gvk)), "w", encoding="utf-8") as f:
                json.dump(standalone, f)
            written += 1
    if written == 0:
        sys.stderr.write("no kinds found (x-kubernetes-group-version-kind)\n")
        return 1
    print(f"k8s-json-schemas: {written} schemas in {out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
