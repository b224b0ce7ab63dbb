#!/usr/bin/env python3
"""Runs an Argo CD resource health check's test cases with a Lua 5.1
interpreter, the way Argo CD's own test does for resource_customizations:

    scripts/argocd_health_test.py DIR [--lua lua5.1]

DIR holds health.lua, health_test.yaml and testdata/. For every test in
health_test.yaml, the object at inputPath (YAML) becomes the Lua global
`obj` (JSON semantics: null and absent are nil, numbers stay numbers,
timestamps stay strings), health.lua runs as a function body (its top-level
`return hs` is the result), and the returned status and message must equal
healthStatus.status and healthStatus.message (an absent message is "").
Only Lua's base and string functions are needed; the check gets no os or
io library, as in Argo CD. Exit 0 when every case passes, 1 otherwise.
"""

import argparse
import datetime
import os
import subprocess
import sys

import yaml


def lua_string(s):
    out = ['"']
    for ch in s:
        code = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif code < 32 or code == 127:
            out.append("\\%03d" % code)
        else:
            out.append(ch)
    out.append('"')
    # Lua 5.1 strings are bytes: non-ASCII text goes in as its UTF-8 bytes.
    return "".join(out)


def lua_value(v):
    if v is None:
        return "nil"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (datetime.datetime, datetime.date)):
        # YAML reads unquoted times as datetimes; the API server's JSON
        # has them as RFC 3339 strings.
        text = v.isoformat()
        if text.endswith("+00:00"):
            text = text[: -len("+00:00")] + "Z"
        return lua_string(text)
    if isinstance(v, str):
        return lua_string(v)
    if isinstance(v, list):
        return "{" + ", ".join(lua_value(x) for x in v if x is not None) + "}"
    if isinstance(v, dict):
        items = [
            "[%s] = %s" % (lua_string(str(k)), lua_value(x))
            for k, x in v.items()
            if x is not None
        ]
        return "{" + ", ".join(items) + "}"
    raise TypeError("cannot express %r in Lua" % (v,))


def run_case(lua, script, obj):
    program = (
        # Argo CD runs with a restricted set of libraries: take away what a
        # health check must not use, so a script relying on it fails here.
        # The result leaves through print, kept aside first.
        "local print = print\n"
        "os = nil; io = nil; require = nil; dofile = nil; loadfile = nil\n"
        "obj = " + lua_value(obj) + "\n"
        "local hs = (function()\n" + script + "\nend)()\n"
        "if type(hs) ~= 'table' then error('health.lua returned no table') end\n"
        "print(tostring(hs.status))\n"
        "print(hs.message == nil and '' or tostring(hs.message))\n"
    )
    done = subprocess.run(
        [lua, "-"], input=program.encode("utf-8"), capture_output=True, timeout=30
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr.decode("utf-8", "replace").strip())
    lines = done.stdout.decode("utf-8").split("\n")
    return lines[0], lines[1] if len(lines) > 1 else ""


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dir")
    parser.add_argument("--lua", default="lua5.1")
    args = parser.parse_args()
    script = open(os.path.join(args.dir, "health.lua"), encoding="utf-8").read()
    spec = yaml.safe_load(open(os.path.join(args.dir, "health_test.yaml"), encoding="utf-8"))
    tests = spec.get("tests") or []
    if not tests:
        print("no test cases in health_test.yaml", file=sys.stderr)
        return 1
    failed = 0
    for case in tests:
        path = case["inputPath"]
        want = case["healthStatus"]
        want_status, want_message = want["status"], want.get("message", "")
        obj = yaml.safe_load(open(os.path.join(args.dir, path), encoding="utf-8"))
        try:
            status, message = run_case(args.lua, script, obj)
        except Exception as e:  # noqa: BLE001 - every failure is reported
            print("FAIL %s: %s" % (path, e))
            failed += 1
            continue
        if (status, message) != (want_status, want_message):
            print("FAIL %s:\n  want %s %r\n  got  %s %r" % (path, want_status, want_message, status, message))
            failed += 1
        else:
            print("ok   %s -> %s" % (path, status))
    print("%d of %d health cases pass" % (len(tests) - failed, len(tests)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
