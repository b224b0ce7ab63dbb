#!/usr/bin/env python3
"""The container image tested as the chart runs it (scripts/image-check.sh
starts the API server and builds the image, then runs this).

Every container runs under podman with runc, with the pod's and the
container's securityContext and resources that the chart renders for its
default values (read back from the Deployment stored in the API server),
on the host network (the API server and the stand-in Kura pods listen on
127.0.0.0/8), with exactly the chart's args and env (the downward-API
fields filled in as the kubelet would).

Tests, in order (a failed one skips those that depend on it):
  image-config        user, entrypoint, command, port, OCI labels; the
                      Dockerfile's final stage declares the same
  image-filesystem    no shell, no package manager, no other program; the
                      C library, libgcc, the CA bundle, nonroot in passwd,
                      dpkg records for the packages
  auditable           the binary's .dep-v0 lists the workspace's crates at
                      Cargo.lock's versions
  version             `kura-agent --version` in the container
  no-tools            the image's binary is the product alone: `--help`
                      lists `run` only, `demo` and `check` are refused as
                      unknown subcommands (exit 2), kura-sim is not in its
                      embedded dependency list (`run` itself: in-cluster)
  in-cluster          `run` with in-cluster configuration only (service
                      host/port env, a TokenRequest token of the chart's
                      ServiceAccount, ca.crt, namespace): the process's
                      credentials (uid/gid 65532, no capabilities, no new
                      privileges, seccomp, read-only root), the
                      KuraInstance's status written by the chart's
                      ServiceAccount (audit log), its Lease, /readyz and the
                      debug page from the host
  token-rotation      a new token swapped in on disk as the kubelet does
                      (..data symlink) is used without a restart, the old
                      one is revoked, a status change is still written
  sigterm             SIGTERM from the runtime (podman stop with the
                      chart's terminationGracePeriodSeconds) while a status
                      write is held up on the wire: the agent waits for it,
                      releases its Lease and exits 0 within the grace

Ends with `image-check: N passed, N failed`.
"""

import argparse
import asyncio
import base64
import calendar
import json
import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
import zlib

SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
NAMESPACE = "kura-image"  # where the KuraInstance and its pods live
INSTANCE = "acme"
KURA_IMAGE = "ghcr.io/tuist/kura:1.0.0"
POD_NAME = "kura-health-agent-6c9d7b8f5-q2x7k"  # what the kubelet would set
SIM_FIRST_IP = (127, 77, 0, 1)
# How long the sigterm test holds up each chunk the agent sends to the API
# server: long enough that the status write is still on the wire when
# SIGTERM comes, short enough for the Lease renewals (every 5 s, 15 s
# Lease) and within the agent's 10 s shutdown grace for writes even on a
# new connection (TLS handshake and request: three chunks held up).
HOLD = 2.5

args = None
work = None
results = []  # (name, ok, detail)
state = {}


def log(msg):
    print(f"image-check: {msg}", flush=True)


class Failed(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failed(what)


def run(cmd, check_rc=True, capture=True, timeout=120, input=None):
    p = subprocess.run(cmd, capture_output=capture, text=True, timeout=timeout, input=input)
    if check_rc and p.returncode != 0:
        raise Failed(f"{' '.join(cmd[:6])} ... exited {p.returncode}: {(p.stderr or '')[-800:]}")
    return p


def kubectl(*a, input=None, check_rc=True):
    return run([args.kubectl, *a], input=input, check_rc=check_rc)


def kget(*a):
    return json.loads(kubectl("get", *a, "-o", "json").stdout)


PODMAN = ["podman", "--runtime", "runc"]
# This sandbox refuses to raise limits: every run lowers them explicitly.
LIMITS = ["--ulimit", "nofile=20000:20000", "--ulimit", "nproc=4096:4096"]


def podman(*a, check_rc=True, timeout=120):
    return run([*PODMAN, *a], check_rc=check_rc, timeout=timeout)


def wait_for(what, timeout, probe, interval=0.5):
    """Calls probe() until it returns a truthy value; returns it."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            v = probe()
            if v:
                return v
        except Failed as e:
            last = str(e)
        time.sleep(interval)
    raise Failed(f"{what}: not within {timeout} s" + (f" ({last})" if last else ""))


def http_get(url, timeout=3, headers=None, context=None):
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout, context=context) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")
    except (urllib.error.URLError, OSError) as e:
        raise Failed(f"GET {url}: {e}")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def port_free(port):
    """Whether a listener could bind the port (as the agent does, with
    SO_REUSEADDR, so connections in TIME_WAIT do not count)."""
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("0.0.0.0", port))
        return True
    except OSError:
        return False
    finally:
        s.close()


# ---------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------

TESTS = []


def test(name, needs=()):
    def register(f):
        TESTS.append((name, tuple(needs), f))
        return f
    return register


def dockerfile_final_stage(path):
    """USER, ENTRYPOINT, CMD, EXPOSE and LABEL keys of the last stage."""
    text = open(path).read().replace("\\\n", " ")
    stages = re.split(r"(?im)^FROM\s", text)
    last = stages[-1]
    out = {"labels": set()}
    for line in last.splitlines():
        line = line.strip()
        m = re.match(r"(?i)^(USER|ENTRYPOINT|CMD|EXPOSE|LABEL)\s+(.*)$", line)
        if not m:
            continue
        key, value = m.group(1).upper(), m.group(2).strip()
        if key == "LABEL":
            out["labels"] |= set(re.findall(r"([\w.\-]+)=", value))
        elif key in ("ENTRYPOINT", "CMD"):
            out[key] = json.loads(value)
        else:
            out[key] = value
    return out


@test("image-config")
def image_config():
    (info,) = json.loads(podman("image", "inspect", args.image).stdout)
    cfg = info["Config"]
    check(cfg.get("User") == "65532:65532", f"user 65532:65532, got {cfg.get('User')!r}")
    check(cfg.get("Entrypoint") == ["/usr/local/bin/kura-agent"], f"entrypoint {cfg.get('Entrypoint')}")
    check(cfg.get("Cmd") == ["run"], f"command {cfg.get('Cmd')}")
    check("8080/tcp" in (cfg.get("ExposedPorts") or {}), f"port 8080 exposed: {cfg.get('ExposedPorts')}")
    labels = cfg.get("Labels") or {}
    want = {
        "org.opencontainers.image.version": args.version,
        "org.opencontainers.image.licenses": "Apache-2.0",
    }
    for k, v in want.items():
        check(labels.get(k) == v, f"label {k}={v!r}, got {labels.get(k)!r}")
    rev = labels.get("org.opencontainers.image.revision", "")
    check(rev.split("-")[0] == args.revision, f"revision label {rev!r} is the commit {args.revision}")
    check(labels.get("org.opencontainers.image.source", "").startswith("https://"), "a source URL label")
    check(len(info["RootFS"]["Layers"]) == 2, f"two layers (root file system, binary), got {len(info['RootFS']['Layers'])}")
    df = dockerfile_final_stage(args.dockerfile)
    check(df.get("USER") == cfg["User"], f"Dockerfile USER {df.get('USER')} = image's")
    check(df.get("ENTRYPOINT") == cfg["Entrypoint"], "Dockerfile ENTRYPOINT = image's")
    check(df.get("CMD") == cfg["Cmd"], "Dockerfile CMD = image's")
    check(df.get("EXPOSE") in cfg["ExposedPorts"], "Dockerfile EXPOSE = image's")
    ours = {k for k in labels if k.startswith("org.opencontainers.image.")}
    missing = ours - {"org.opencontainers.image.created"} - df["labels"]
    check(not missing, f"Dockerfile labels lack {sorted(missing)}")
    state["image_size"] = info["Size"]
    return f"{info['Size'] / 1048576:.1f} MiB, labels {sorted(k.rsplit('.', 1)[1] for k in ours)}"


@test("image-filesystem")
def image_filesystem():
    name = f"kura-image-export-{os.getpid()}"
    podman("create", "--name", name, args.image)
    tar_path = os.path.join(work, "image.tar")
    try:
        podman("export", "-o", tar_path, name)
    finally:
        podman("rm", "-f", name, check_rc=False)
    files = {}
    with tarfile.open(tar_path) as tar:
        for m in tar.getmembers():
            files[m.name.lstrip("./")] = m
        binary = tar.extractfile("usr/local/bin/kura-agent")
        check(binary is not None, "usr/local/bin/kura-agent in the image")
        state["binary"] = os.path.join(work, "kura-agent-from-image")
        with open(state["binary"], "wb") as f:
            f.write(binary.read())
        os.chmod(state["binary"], 0o755)
        passwd = tar.extractfile("etc/passwd").read().decode()
        bundle = tar.extractfile("etc/ssl/certs/ca-certificates.crt").read().decode()
    # Programs: only the agent (and the dynamic loader it needs).
    programs = sorted(n for n, m in files.items()
                      if m.isfile() and m.mode & 0o111 and not re.search(r"\.so(\.[0-9]+)*$", n))
    check(programs == ["usr/local/bin/kura-agent"], f"the only program is the agent, found {programs}")
    for bad in ("bin/sh", "bin/bash", "bin/dash", "usr/bin/dpkg", "usr/bin/apt", "usr/bin/apt-get", "bin/busybox"):
        check(bad not in files and "usr/" + bad not in files, f"{bad} must not be in the image")
    for need in ("lib64/ld-linux-x86-64.so.2", "lib/x86_64-linux-gnu/libc.so.6",
                 "lib/x86_64-linux-gnu/libgcc_s.so.1", "etc/os-release", "etc/nsswitch.conf"):
        check(need in files, f"{need} in the image")
    check("nonroot:x:65532:65532:" in passwd, "nonroot (65532) in /etc/passwd")
    check(files["home/nonroot"].uid == 65532, "/home/nonroot belongs to 65532")
    certs = bundle.count("BEGIN CERTIFICATE")
    check(certs > 100, f"CA bundle with > 100 certificates, got {certs}")
    status_d = sorted(n.rsplit("/", 1)[1] for n in files if n.startswith("var/lib/dpkg/status.d/") and files[n].isfile())
    check(status_d == ["base-files", "ca-certificates", "libc6", "libgcc-s1"], f"dpkg records {status_d}")
    return f"{len(files)} entries, {certs} CA certificates, packages {status_d}"


def dep_v0(binary):
    out = os.path.join(work, "dep-v0")
    run(["objcopy", "--dump-section", f".dep-v0={out}", binary, os.path.join(work, "objcopy.out")])
    with open(out, "rb") as f:
        return json.loads(zlib.decompress(f.read()))


def cargo_lock_versions():
    text = open(os.path.join(args.root, "Cargo.lock")).read()
    return {m.group(1): m.group(2) for m in re.finditer(r'name = "([^"]+)"\nversion = "([^"]+)"', text)}


@test("auditable", needs=("image-filesystem",))
def auditable():
    deps = dep_v0(state["binary"])
    pkgs = {p["name"]: p["version"] for p in deps["packages"]}
    lock = cargo_lock_versions()
    for name in ("kura-agent", "kura-schemas", "kura-gate", "kube-client", "tokio", "rustls", "hyper"):
        check(name in pkgs, f"{name} in the embedded dependency list")
        check(pkgs[name] == lock.get(name), f"{name} {pkgs[name]} = Cargo.lock's {lock.get(name)}")
    root = [p for p in deps["packages"] if p.get("root")]
    check([p["name"] for p in root] == ["kura-agent"], f"the root package is kura-agent: {root}")
    return f"{len(pkgs)} packages embedded"


def secure_run_options(chart):
    """podman options for the chart's pod and container securityContext
    and resources; refuses anything it does not know how to apply."""
    pod_sc, sc, res = chart["pod_sc"], chart["sc"], chart["resources"]
    opts = []
    known_pod = {"runAsNonRoot", "runAsUser", "runAsGroup", "fsGroup", "seccompProfile"}
    known_ctr = {"allowPrivilegeEscalation", "readOnlyRootFilesystem", "runAsNonRoot", "capabilities",
                 "seccompProfile", "runAsUser", "runAsGroup"}
    check(set(pod_sc) <= known_pod, f"pod securityContext keys not applied here: {set(pod_sc) - known_pod}")
    check(set(sc) <= known_ctr, f"container securityContext keys not applied here: {set(sc) - known_ctr}")
    uid = sc.get("runAsUser", pod_sc.get("runAsUser"))
    gid = sc.get("runAsGroup", pod_sc.get("runAsGroup"))
    check(uid is not None and gid is not None, "runAsUser and runAsGroup set")
    if sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot"):
        check(uid != 0, "runAsNonRoot with a non-zero user")
    opts += ["--user", f"{uid}:{gid}"]
    if "fsGroup" in pod_sc:
        opts += ["--group-add", str(pod_sc["fsGroup"])]
    for profile in (pod_sc.get("seccompProfile"), sc.get("seccompProfile")):
        check(profile in (None, {"type": "RuntimeDefault"}), f"seccomp profile {profile}")
    # RuntimeDefault: the runtime's default profile, which podman applies.
    if sc.get("allowPrivilegeEscalation") is False:
        opts += ["--security-opt", "no-new-privileges"]
    if sc.get("readOnlyRootFilesystem"):
        # Exactly a read-only root: no tmpfs that podman would add.
        opts += ["--read-only", "--read-only-tmpfs=false"]
    caps = sc.get("capabilities", {})
    check(set(caps) <= {"drop"} and caps.get("drop") == ["ALL"], f"capabilities {caps}")
    opts += ["--cap-drop", "all"]
    limits, requests = res.get("limits", {}), res.get("requests", {})
    check(set(limits) <= {"memory", "cpu"} and set(requests) <= {"memory", "cpu"}, f"resources {res}")
    if "memory" in limits:
        m = re.fullmatch(r"(\d+)(Mi|Gi)", limits["memory"])
        check(m, f"memory limit {limits['memory']}")
        opts += ["--memory", f"{int(m.group(1)) * (1024 if m.group(2) == 'Gi' else 1)}m"]
    if "cpu" in requests:
        m = re.fullmatch(r"(\d+)m", str(requests["cpu"]))
        check(m, f"cpu request {requests['cpu']}")
        opts += ["--cpu-shares", str(max(2, int(m.group(1)) * 1024 // 1000))]
    if "cpu" in limits:
        m = re.fullmatch(r"(\d+)m", str(limits["cpu"]))
        check(m, f"cpu limit {limits['cpu']}")
        opts += ["--cpus", str(int(m.group(1)) / 1000)]
    return opts


def chart_deployment():
    if "chart" in state:
        return state["chart"]
    (dep,) = [d for d in kget("deployments", "-n", "kura-system")["items"]]
    pod = dep["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    chart = {
        "namespace": dep["metadata"]["namespace"],
        "service_account": pod["serviceAccountName"],
        "grace": pod["terminationGracePeriodSeconds"],
        "pod_sc": pod.get("securityContext", {}),
        "sc": ctr.get("securityContext", {}),
        "resources": ctr.get("resources", {}),
        "args": ctr.get("args", []),
        "volumes": pod.get("volumes", []),
        "mounts": ctr.get("volumeMounts", []),
        "command": ctr.get("command"),
        "env": ctr.get("env", []),
        "image": ctr["image"],
        "debug_port": next(p["containerPort"] for p in ctr["ports"] if p["name"] == "debug"),
    }
    check(chart["command"] is None, "the chart keeps the image's entrypoint")
    check(chart["image"] == args.image, f"the chart deploys {chart['image']}, the image built is {args.image}")
    state["chart"] = chart
    return chart


def container_env(chart):
    """The chart's env as the kubelet fills it in."""
    fields = {"metadata.name": POD_NAME, "metadata.namespace": chart["namespace"]}
    out = []
    for e in chart["env"]:
        if "value" in e:
            out += ["--env", f"{e['name']}={e['value']}"]
            continue
        ref = e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
        check(ref in fields, f"env {e['name']}: cannot fill in {e.get('valueFrom')}")
        out += ["--env", f"{e['name']}={fields[ref]}"]
    return out


def base_run(name, chart, extra=()):
    return [*PODMAN, "run", "-d", "--name", name, "--network", "host", *LIMITS,
            *secure_run_options(chart), *extra]


def started_containers():
    return state.setdefault("containers", [])


@test("version")
def version():
    chart = chart_deployment()
    p = run([*PODMAN, "run", "--rm", "--network", "host", *LIMITS, *secure_run_options(chart),
             args.image, "--version"])
    check(p.stdout.strip() == f"kura-agent {args.version}", f"--version printed {p.stdout.strip()!r}")
    return p.stdout.strip()


@test("no-tools", needs=("auditable",))
def no_tools():
    chart = chart_deployment()
    base = [*PODMAN, "run", "--rm", "--network", "host", *LIMITS, *secure_run_options(chart), args.image]
    p = subprocess.run(base + ["--help"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0, f"--help exit code {p.returncode}: {p.stderr[-500:]}")
    commands = re.findall(r"^  (\S+)\s", p.stdout.split("Commands:", 1)[-1].split("Options:", 1)[0], re.M)
    check(commands == ["run", "help"], f"the product's subcommands are run (and help): {commands}")
    for tool in ("demo", "check", "fleet-load-side"):
        p = subprocess.run(base + [tool, "--help"], capture_output=True, text=True, timeout=60)
        check(p.returncode == 2 and "unrecognized subcommand" in p.stderr,
              f"`{tool}` is absent from the product binary (exit {p.returncode}: {p.stderr[-300:]})")
    p = subprocess.run(base + ["run", "--help"], capture_output=True, text=True, timeout=60)
    check(p.returncode == 0 and "--gate-config" in p.stdout, f"`run --help` works: {p.stderr[-300:]}")
    # kura-sim's code is not in the binary: none of its string literals.
    # (The embedded dependency list cannot say it: cargo-auditable records
    # kura-sim, an optional dependency and a dev-dependency of kura-agent,
    # whatever the features.)
    with open(state["binary"], "rb") as f:
        code = f.read()
    for literal in (b"loopback addresses unavailable; falling back",
                    b"the simulator must be started inside a tokio runtime"):
        check(literal not in code, f"kura-sim's {literal.decode()!r} is not in the product binary")
    return "run only; demo, check, fleet-load-side refused; no kura-sim code"


# ---- the in-cluster run ------------------------------------------------------


class DelayProxy:
    """A TCP relay to the API server (the cluster's `kubernetes` Service in
    miniature) that can hold up what the agent sends: `delay` seconds per
    chunk, client to server, and, while `held` is set, every chunk until it
    is cleared. TLS passes through untouched."""

    def __init__(self, target_port):
        self.target_port = target_port
        self.delay = 0.0
        self.held = False
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._main, daemon=True)
        self.thread.start()
        self.ready.wait(10)

    def _main(self):
        asyncio.set_event_loop(self.loop)
        self.server = self.loop.run_until_complete(
            asyncio.start_server(self._handle, "127.0.0.1", 0))
        self.port = self.server.sockets[0].getsockname()[1]
        self.ready.set()
        self.loop.run_forever()

    async def _pipe(self, reader, writer, delayed):
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if delayed and self.delay:
                    await asyncio.sleep(self.delay)
                while delayed and self.held:
                    await asyncio.sleep(0.05)
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            try:
                writer.close()
            except Exception:
                pass

    async def _handle(self, creader, cwriter):
        try:
            sreader, swriter = await asyncio.open_connection("127.0.0.1", self.target_port)
        except OSError:
            cwriter.close()
            return
        await asyncio.gather(self._pipe(creader, swriter, True), self._pipe(sreader, cwriter, False))

    def stop(self):
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)


class SimPod:
    """One stand-in Kura pod: `kura-agent simulate` on its own loopback IP
    and the chart's report port."""

    def __init__(self, name, uid, ip, port):
        self.name, self.uid, self.ip, self.port = name, uid, ip, port
        self.proc = None
        self.scenario = os.path.join(work, f"sim-{name}.json")
        with open(self.scenario, "w") as f:
            json.dump({"description": f"stand-in pod {name}",
                       "addressing": {"mode": "loopback", "first_ip": ip, "port": port},
                       "pods": [{"name": name, "uid": uid}]}, f)

    def start(self):
        check(self.proc is None, f"{self.name} is running already")
        self.proc = subprocess.Popen([args.sim_binary or args.binary, "simulate", self.scenario], stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        want = f"http://{self.ip}:{self.port}/"
        try:
            for line in self.proc.stdout:
                if line.startswith(self.name + " "):
                    check(want in line, f"simulated {self.name} at {want}, got {line.strip()}")
                if line.startswith("# serving"):
                    return
            raise Failed(f"simulator for {self.name} exited: {self.proc.wait()}")
        except Failed:
            self.stop()
            raise

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


def apply_json(obj):
    kubectl("apply", "--server-side", "--field-manager=image-check", "-f", "-", input=json.dumps(obj))


def make_fleet(replicas):
    kubectl("create", "namespace", NAMESPACE)
    apply_json({"apiVersion": "kura.tuist.dev/v1alpha1", "kind": "KuraInstance",
                "metadata": {"name": INSTANCE, "namespace": NAMESPACE},
                "spec": {"image": KURA_IMAGE, "replicas": replicas, "accountHandle": "image-check",
                         "region": "local"}})
    pods = []
    port = state["chart_port"]
    for i in range(replicas):
        name = f"{INSTANCE}-{i}"
        ip = "%d.%d.%d.%d" % (*SIM_FIRST_IP[:3], SIM_FIRST_IP[3] + i)
        apply_json({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": name, "namespace": NAMESPACE,
                                 "labels": {"app.kubernetes.io/name": "kura",
                                            "app.kubernetes.io/instance": INSTANCE},
                                 "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                                                      "name": INSTANCE, "controller": True,
                                                      "uid": "00000000-0000-0000-0000-000000000001"}]},
                    "spec": {"nodeName": "fake-node",
                             "containers": [{"name": "kura", "image": KURA_IMAGE,
                                             "ports": [{"name": "http", "containerPort": port}]}]}})
        uid = kget("pod", name, "-n", NAMESPACE)["metadata"]["uid"]
        status = {"status": {
            "phase": "Running", "hostIP": "127.0.0.1", "podIP": ip, "podIPs": [{"ip": ip}],
            "startTime": "2026-01-01T00:00:00Z",
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"},
                           {"type": "ContainersReady", "status": "True",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "containerStatuses": [{"name": "kura", "ready": True, "started": True, "restartCount": 0,
                                   "image": KURA_IMAGE, "imageID": "",
                                   "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]}}
        kubectl("patch", "pod", name, "-n", NAMESPACE, "--subresource=status", "--type=merge",
                "-p", json.dumps(status))
        pod = SimPod(name, uid, ip, port)
        pod.start()
        pods.append(pod)
    return pods


def mint_token(secret):
    """A TokenRequest token of the chart's ServiceAccount, bound to a
    Secret (deleting the Secret revokes it): returns (token, jti)."""
    chart = state["chart"]
    kubectl("create", "secret", "generic", secret, "-n", chart["namespace"])
    uid = kget("secret", secret, "-n", chart["namespace"])["metadata"]["uid"]
    token = kubectl("create", "token", chart["service_account"], "-n", chart["namespace"],
                    "--duration=1h", "--bound-object-kind=Secret", f"--bound-object-name={secret}",
                    f"--bound-object-uid={uid}").stdout.strip()
    payload = token.split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    return token, claims["jti"]


def write_projected(dir_, token, ca, namespace):
    """The kubelet's projected-volume layout: a timestamped directory, the
    ..data symlink swapped atomically, the files as links through it."""
    stamp = time.strftime("..%Y_%m_%d_%H_%M_%S.") + str(time.monotonic_ns() % 10**9)
    data = os.path.join(dir_, stamp)
    os.makedirs(data)
    for name, content in (("token", token), ("ca.crt", ca), ("namespace", namespace)):
        path = os.path.join(data, name)
        with open(path, "w") as f:
            f.write(content)
        # fsGroup: readable by the group, as the kubelet sets it.
        os.chown(path, 0, 65532)
        os.chmod(path, 0o640)
    os.chmod(data, 0o755)
    old = os.path.realpath(os.path.join(dir_, "..data")) if os.path.islink(os.path.join(dir_, "..data")) else None
    tmp = os.path.join(dir_, "..data_tmp")
    os.symlink(stamp, tmp)
    os.rename(tmp, os.path.join(dir_, "..data"))
    for name in ("token", "ca.crt", "namespace"):
        link = os.path.join(dir_, name)
        if not os.path.islink(link):
            os.symlink(os.path.join("..data", name), link)
    if old and old != os.path.realpath(data):
        shutil.rmtree(old)


def audit_events(since=0.0):
    sa = f"system:serviceaccount:{state['chart']['namespace']}:{state['chart']['service_account']}"
    out = []
    try:
        with open(args.audit_log) as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue
                if e.get("user", {}).get("username") != sa or e.get("stage") != "ResponseComplete":
                    continue
                out.append(e)
    except FileNotFoundError:
        pass
    return out


def audit_time(e):
    """When the API server answered the request (epoch seconds)."""
    return calendar.timegm(time.strptime(e["stageTimestamp"][:19], "%Y-%m-%dT%H:%M:%S")) + float(
        "0" + e["stageTimestamp"][19:].rstrip("Z"))


def credential(e):
    return ",".join(e.get("user", {}).get("extra", {}).get("authentication.kubernetes.io/credential-id", []))


def status_writes(jti=None):
    return [e for e in audit_events()
            if e.get("objectRef", {}).get("resource") == "kurainstances"
            and e.get("objectRef", {}).get("subresource") == "status"
            and e.get("verb") == "patch"
            and e.get("responseStatus", {}).get("code") == 200
            and (jti is None or f"JTI={jti}" in credential(e))]


def instance_status():
    return kget("kurainstance", INSTANCE, "-n", NAMESPACE).get("status", {})


def configmap_volumes(chart):
    """The chart's ConfigMap volumes (the gate configuration) as the kubelet
    mounts them: each ConfigMap's keys as files in a directory, mounted
    read-only at the container's mountPath. Any other kind of volume is
    refused, so a new one is not silently left out."""
    volumes = {v["name"]: v for v in chart["volumes"]}
    out = []
    for m in chart["mounts"]:
        vol = volumes.get(m["name"], {})
        check("configMap" in vol, f"volume {m['name']}: only ConfigMap volumes are mounted here: {vol}")
        cm = kget("configmap", "-n", chart["namespace"], vol["configMap"]["name"])
        d = os.path.join(work, f"configmap-{m['name']}")
        os.makedirs(d, exist_ok=True)
        os.chmod(d, 0o755)
        for key, text in cm.get("data", {}).items():
            path = os.path.join(d, key)
            with open(path, "w") as f:
                f.write(text)
            os.chmod(path, 0o644)
        out += ["--volume", f"{d}:{m['mountPath']}:ro"]
    return out


def proc_status(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            fields[k] = v.strip()
    return fields


def agent_pid(name):
    (info,) = json.loads(podman("inspect", name).stdout)
    return info["State"]["Pid"], info["State"]["StartedAt"], info.get("RestartCount", 0)


@test("in-cluster", needs=("image-config",))
def in_cluster():
    chart = chart_deployment()
    port_arg = next(a for a in chart["args"] if a.startswith("--port="))
    state["chart_port"] = int(port_arg.split("=", 1)[1])
    check(port_free(chart["debug_port"]),
          f"port {chart['debug_port']} (the chart's debug port) is busy on this host")
    state["pods"] = make_fleet(3)
    token, jti = mint_token("agent-token-1")
    state["token1"] = token
    sa = os.path.join(work, "serviceaccount")
    os.makedirs(sa)
    os.chmod(sa, 0o755)
    state["sa_dir"] = sa
    with open(args.ca) as f:
        state["ca"] = f.read()
    write_projected(sa, token, state["ca"], chart["namespace"])
    proxy = DelayProxy(args.apiserver_port)
    state["proxy"] = proxy
    name = f"kura-image-agent-{os.getpid()}"
    state["agent"] = name
    started_containers().append(name)
    cmd = base_run(name, chart, [
        # What the kubelet adds for the `kubernetes` Service and the
        # automounted service account; nothing else (no kubeconfig).
        "--env", "KUBERNETES_SERVICE_HOST=127.0.0.1",
        "--env", f"KUBERNETES_SERVICE_PORT={proxy.port}",
        "--volume", f"{sa}:{SA_DIR}:ro",
        *configmap_volumes(chart),
        *container_env(chart),
    ]) + [args.image, *chart["args"]]
    state["agent_cmd"] = cmd
    run(cmd)
    pid, started, _ = agent_pid(name)
    state["started"] = started
    st = proc_status(pid)
    check(st["Uid"].split() == ["65532"] * 4, f"uids {st['Uid']}")
    check(st["Gid"].split() == ["65532"] * 4, f"gids {st['Gid']}")
    check(st["Groups"].split() == ["65532"], f"supplementary groups {st['Groups']}")
    for cap in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        check(int(st[cap], 16) == 0, f"{cap} {st[cap]}: every capability dropped")
    check(st["NoNewPrivs"] == "1", "no new privileges")
    check(st["Seccomp"] == "2", f"seccomp filter on (mode {st['Seccomp']})")
    with open(f"/proc/{pid}/mountinfo") as f:
        root = [l.split() for l in f if l.split()[4] == "/"]
    check(root and "ro" in root[0][5].split(","), f"root mounted read-only: {root}")
    with open(f"/proc/{pid}/environ", "rb") as f:
        env = dict(kv.split("=", 1) for kv in f.read().decode().split("\0") if "=" in kv)
    check("KUBECONFIG" not in env, "no KUBECONFIG in the container")
    check(env.get("POD_NAME") == POD_NAME and env.get("POD_NAMESPACE") == chart["namespace"],
          "the downward-API env")

    def written():
        s = instance_status().get("rolloutHealth")
        return s if s and s.get("sampledPods") == 3 and s.get("agent") == POD_NAME else None
    health = wait_for("status.rolloutHealth with 3 sampled pods, by the containerised agent", 90, written, 1)
    gate = instance_status().get("rolloutGate")
    check(gate and gate.get("verdict") in ("healthy", "unhealthy", "hard_stop"), f"status.rolloutGate {gate}")
    writes = wait_for("the status write in the audit log", 10, lambda: status_writes(jti))
    check(all(e["objectRef"]["namespace"] == NAMESPACE for e in writes), "writes to the instance's namespace")
    lease = [l for l in kget("leases", "-n", chart["namespace"])["items"]
             if l["spec"].get("holderIdentity") == POD_NAME]
    check(len(lease) == 1, f"one Lease held by {POD_NAME}, got {len(lease)}")
    state["lease"] = lease[0]["metadata"]["name"]
    code, body = http_get(f"http://127.0.0.1:{chart['debug_port']}/readyz")
    check(code == 200, f"/readyz from the host: {code} {body[:200]}")
    code, body = http_get(f"http://127.0.0.1:{chart['debug_port']}/")
    check(code == 200 and INSTANCE in body, "the debug page from the host lists the instance")
    return (f"ready={health.get('ready')} sampled {health['sampledPods']}/{health.get('expectedPods')} "
            f"verdict {gate['verdict']}; {len(writes)} status write(s) by the ServiceAccount; Lease {state['lease']}")


def debug_instance():
    code, body = http_get(f"http://127.0.0.1:{state['chart']['debug_port']}/debug/instances")
    check(code == 200, f"/debug/instances: {code}")
    data = json.loads(body)
    items = data if isinstance(data, list) else data.get("instances", [])
    for i in items:
        if i.get("name") == INSTANCE and i.get("namespace") == NAMESPACE:
            return i
    return None


@test("token-rotation", needs=("in-cluster",))
def token_rotation():
    chart = state["chart"]
    token2, jti2 = mint_token("agent-token-2")
    rotated = time.monotonic()
    write_projected(state["sa_dir"], token2, state["ca"], chart["namespace"])
    # kube-client reads the token file again at most a minute after the
    # last read (and its requests are every few seconds: Lease renewals).
    wait_for("a request with the rotated token", 90,
             lambda: [e for e in audit_events() if f"JTI={jti2}" in credential(e)], 1)
    picked_up = time.monotonic() - rotated
    # Revoke the old token: its Secret goes, the API server rejects it.
    kubectl("delete", "secret", "agent-token-1", "-n", chart["namespace"])
    ctx = ssl.create_default_context(cafile=args.ca)
    url = f"https://127.0.0.1:{args.apiserver_port}/api"
    bearer = {"Authorization": f"Bearer {state['token1']}"}
    # (The API server caches a token's authentication for up to 10 s.)
    wait_for("the old token rejected", 30, lambda: http_get(url, headers=bearer, context=ctx)[0] == 401)
    revoked = time.time()
    # A material change must still be written, with the new token.
    pod = state["pods"][1]
    pod.stop()

    def down():
        s = instance_status().get("rolloutHealth", {})
        return s if s.get("sampledPods") == 2 else None
    wait_for("status with one pod down, written after the rotation", 60, down, 1)
    later = [e for e in status_writes(jti2) if audit_time(e) >= revoked]
    check(later, "a status write with the new token after the old one was revoked")
    _, started, restarts = agent_pid(state["agent"])
    check(started == state["started"] and restarts == 0, "the container was not restarted")
    logs = podman("logs", state["agent"]).stdout + podman("logs", state["agent"]).stderr
    failures = [line for line in logs.splitlines()
                if re.search(r"\b401\b", line) or "Unauthorized" in line]
    check(not failures, f"no authentication failure in the agent's log: {failures[:3]}")
    return f"new token used {picked_up:.0f} s after the swap; old token revoked; change written with the new one"


@test("sigterm", needs=("in-cluster",))
def sigterm():
    chart = state["chart"]
    name = state["agent"]
    grace = chart["grace"]
    proxy = state["proxy"]
    pod = state["pods"][1]
    if pod.proc is not None:
        # (When token-rotation did not run: one pod down first.)
        pod.stop()
        wait_for("status with one pod down", 60,
                 lambda: instance_status().get("rolloutHealth", {}).get("sampledPods") == 2, 1)
    # Hold up everything the agent sends to the API server from now on, so
    # the status write of the next sweep is still on the wire when SIGTERM
    # comes.
    proxy.delay = HOLD
    pod.start()

    def recomputed():
        i = debug_instance()
        h = (i or {}).get("health") or {}
        return i if h.get("sampledPods") == 3 else None
    wait_for("the agent computing the recovered status", 40, recomputed, 0.1)
    # From here on nothing the agent sends reaches the API server until it
    # has logged its shutdown: the status write it starts now is certainly
    # still on the wire at SIGTERM, however long the runtime takes to
    # deliver the signal on a loaded machine. (The Lease's renewals are held
    # up too, for a few seconds of its 15.)
    proxy.held = True
    check(instance_status().get("rolloutHealth", {}).get("sampledPods") == 2,
          "the recovered status is not written yet (the write is held up)")
    t0 = time.monotonic()
    stop = subprocess.Popen([*PODMAN, "stop", "--time", str(grace), name],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def shutdown_logged():
        logs = podman("logs", name, check_rc=False)
        return "shutting down" in (logs.stdout + logs.stderr)
    try:
        wait_for("the agent logging its shutdown", grace, shutdown_logged, 0.1)
    finally:
        # Released: the held-up write lands; the rest of the shutdown (the
        # Lease's deletion, best effort within 5 s) goes through unhindered.
        proxy.held = False
        proxy.delay = 0.0
    released = time.monotonic() - t0
    landed = None
    while stop.poll() is None:
        if landed is None and instance_status().get("rolloutHealth", {}).get("sampledPods") == 3:
            landed = time.monotonic() - t0
        time.sleep(0.1)
    elapsed = time.monotonic() - t0
    proxy.delay = 0.0
    check(stop.returncode == 0, f"podman stop: {stop.stderr.read()[-500:]}")
    (info,) = json.loads(podman("inspect", name).stdout)
    code = info["State"]["ExitCode"]
    logs = podman("logs", name)
    text = logs.stdout + logs.stderr
    lines = [json.loads(l) for l in text.splitlines() if l.startswith("{")]
    msgs = [l.get("fields", {}).get("message", "") for l in lines]
    shutting = [l for l in lines if l.get("fields", {}).get("message", "").startswith("shutting down")]
    check(code == 0, f"exit code {code} (137 would be SIGKILL after the grace)")
    check(elapsed < grace, f"stopped in {elapsed:.1f} s, grace {grace} s")
    check(shutting and shutting[0]["fields"].get("pending", 0) >= 1,
          f"a status write was pending at SIGTERM: {shutting}")
    check(not any("left unwritten" in m for m in msgs), "no status write left unwritten")
    check(msgs and msgs[-1] == "stopped", f"the last log line is 'stopped': {msgs[-3:]}")
    health = instance_status().get("rolloutHealth", {})
    check(health.get("sampledPods") == 3, f"the last computed status was written: sampledPods {health.get('sampledPods')}")
    leases = [l["metadata"]["name"] for l in kget("leases", "-n", chart["namespace"])["items"]]
    check(state["lease"] not in leases, f"the Lease was released: {leases}")
    written = f"written {landed:.1f} s after it" if landed is not None else "written"
    return (f"exit 0 in {elapsed:.1f} s (grace {grace} s); {shutting[0]['fields']['pending']} write(s) pending "
            f"at SIGTERM, held {released:.1f} s, {written}, before exit; Lease released")


# ---------------------------------------------------------------------------


def cleanup():
    for name in list(state.get("containers", [])):
        if name == state.get("agent") and args.keep_logs:
            try:
                logs = podman("logs", name, check_rc=False)
                with open(os.path.join(work, "agent.log"), "w") as f:
                    f.write(logs.stdout + logs.stderr)
            except Exception:
                pass
        podman("rm", "-f", "--time", "2", name, check_rc=False)
    for pod in state.get("pods", []):
        pod.stop()
    if "proxy" in state:
        state["proxy"].stop()


def main():
    global args, work
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--image", required=True)
    p.add_argument("--binary", required=True, help="the image's kura-agent binary")
    p.add_argument("--sim-binary", help="a kura-agent binary with the tools, for the stand-in pods' "
                   "`simulate` (default: --binary, which the product binary cannot serve)")
    p.add_argument("--version", required=True)
    p.add_argument("--revision", required=True)
    p.add_argument("--kubectl", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--apiserver-port", type=int, required=True)
    p.add_argument("--audit-log", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--dockerfile", required=True)
    p.add_argument("--keep-logs", action="store_true")
    p.add_argument("only", nargs="*", help="run only these tests (and what they need)")
    args = p.parse_args()
    work = args.work
    passed = failed = 0
    done = {}
    wanted = set(args.only)
    for name, needs, _ in reversed(TESTS):
        if name in wanted:
            wanted |= set(needs)
    try:
        for name, needs, f in TESTS:
            if args.only and name not in wanted:
                continue
            missing = [n for n in needs if not done.get(n)]
            if missing:
                print(f"FAIL - {name}: skipped, needs {', '.join(missing)}", flush=True)
                failed += 1
                done[name] = False
                continue
            t0 = time.monotonic()
            try:
                detail = f()
                print(f"ok   - {name} ({time.monotonic() - t0:.1f} s): {detail}", flush=True)
                passed += 1
                done[name] = True
            except (Failed, subprocess.TimeoutExpired, OSError, ValueError, KeyError) as e:
                print(f"FAIL - {name} ({time.monotonic() - t0:.1f} s): {type(e).__name__}: {e}", flush=True)
                failed += 1
                done[name] = False
    finally:
        cleanup()
    print(f"image-check: {passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
