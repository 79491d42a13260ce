#!/usr/bin/env bash
# The CPU container image, built and run: builds deploy/Dockerfile with podman (Debian's
# package; no Docker daemon or image registry is needed) around the release binary already
# built, on a Debian base made with debootstrap (deploy/debian-base.sh), starts it with the small
# test model mounted, waits for /health, sends a real decision request through it with an API
# key given in the environment as Kubernetes does (and one without, which must be refused), runs
# the image's HEALTHCHECK, stops it with SIGTERM (it must drain and exit 0), and prints and
# writes the image size, the build time and the start-to-first-answer time:
#
#     deploy/image-test.sh [REPORT.json]     (default target/image/image-test.json)
#
# Needs root and the release binary (cargo build --release -p decide; DECIDE_BINARY=PATH to use
# another) and DECIDE_TEST_MODEL (default: scripts/fetch-model.sh smol). Installs podman, runc
# and debootstrap with apt-get when missing. Takes 1-3 minutes (~40 s of it making the base).
#
# What this sandbox needs, and why (each is a flag below; none changes the image):
#   podman build --isolation chroot   the OCI runtime cannot run the RUN steps here (crun 1.8
#                                     refuses the machine's hybrid cgroup v1/v2 layout); chroot
#                                     isolation needs none, and shares the host's network, so
#                                     apt-get in the Dockerfile reaches Debian's mirror
#   podman run --runtime runc         runc runs containers on hybrid cgroups; crun does not
#   --ulimit nofile=..,nproc=..       podman's default limits (1048576 open files, and a process
#                                     limit) are refused here: root has no CAP_SYS_RESOURCE to
#                                     raise limits. Open files: the machine's hard limit (20000
#                                     here); processes: at most 32768 (the hard limit itself,
#                                     96367, was refused too)
#   --network host                    the server listens on a free loopback port, so the test's
#                                     traffic stays on 127.0.0.1 (no bridge, no NAT)
#   --format docker                   keeps the HEALTHCHECK, which the OCI format drops
#   (podman run's two "unable to get systemd connection ... healthchecks" lines are left out:
#   with no systemd, podman 4.3 cannot time the HEALTHCHECK, whatever --health-interval says;
#   the test runs it once itself with `podman healthcheck run`)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

report="${1:-target/image/image-test.json}"
image=localhost/decide:cpu
base=localhost/decide-debian-base:bookworm
name="decide-image-test-$$"
key="image-test-key-$$"
mkdir -p target/image "$(dirname "$report")"

need=()
command -v podman >/dev/null || need+=(podman)
command -v runc >/dev/null || need+=(runc)
command -v debootstrap >/dev/null || need+=(debootstrap)
if ((${#need[@]})); then
    echo "installing ${need[*]} (Debian packages)"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
echo "$(podman --version), $(runc --version | head -1)"

binary="${DECIDE_BINARY:-}"
if [[ -z "$binary" ]]; then
    cargo build --release -p decide
    binary=target/release/decide
fi
model="${DECIDE_TEST_MODEL:-$(scripts/fetch-model.sh smol)}"
model_name="$(basename "$model")"

cleanup() {
    podman rm -f -t 0 "$name" >/dev/null 2>&1 || true
    rm -f target/image/decide
}
trap cleanup EXIT

# The binary as the Dockerfile's `source` stage leaves it: debug sections stripped (symbols
# kept, so a backtrace still names functions). In the build context, where .dockerignore lets
# only this file of target/ through.
strip --strip-debug -o target/image/decide "$binary"

echo "== the base image"
# The last run's image goes first, so that a base made anew can replace the one it was built on.
podman rmi -f "$image" >/dev/null 2>&1 || true
deploy/debian-base.sh "$base"

echo "== podman build -f deploy/Dockerfile (BINARY=prebuilt, BASE_IMAGE=$base)"
build_started=$(date +%s.%N)
podman build --isolation chroot --format docker --layers=false --quiet \
    -f deploy/Dockerfile --build-arg BINARY=prebuilt --build-arg DECIDE_BINARY=target/image/decide \
    --build-arg BASE_IMAGE="$base" -t "$image" . >/dev/null
build_s=$(python3 -c "import sys; print(round($(date +%s.%N) - $build_started, 1))")
size_bytes=$(podman image inspect --format '{{.Size}}' "$image")
# What a registry stores and a node pulls: the layers, gzip-compressed.
compressed_bytes=$(podman save --format docker-archive "$image" 2>/dev/null | gzip -6 | wc -c)
echo "built $image in ${build_s} s: $((size_bytes / 1000000)) MB ($((compressed_bytes / 1000000)) MB gzipped)"

echo "== podman run: the model mounted read-only, an API key from the environment"
port="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
hard_files=$(ulimit -Hn); [[ "$hard_files" == unlimited ]] && hard_files=1048576
hard_procs=$(ulimit -Hu); [[ "$hard_procs" == unlimited ]] && hard_procs=32768
files=$((hard_files < 1048576 ? hard_files : 1048576))
procs=$((hard_procs < 32768 ? hard_procs : 32768))
# Startup tuning and calibration are turned off: they run after the server is ready and only
# load the machine here (the image's defaults keep them on).
run_started=$(date +%s.%N)
podman run -d --name "$name" --runtime runc --network host \
    --ulimit "nofile=$files:$files" --ulimit "nproc=$procs:$procs" \
    -e DECIDE_HOST=127.0.0.1 -e DECIDE_PORT="$port" -e DECIDE_API_KEY="$key" \
    -v "$(realpath "$model"):/models/$model_name:ro" \
    "$image" --model "/models/$model_name" --tune-questions none --calibration-questions none \
    2> >(grep -v "unable to get systemd connection" >&2) >/dev/null

python3 - "$port" "$key" "$run_started" "$report" "$image" "$size_bytes" "$compressed_bytes" "$build_s" "$base" "$name" <<'PY'
import json, subprocess, sys, time, urllib.error, urllib.request

port, key, run_started, report, image, size, compressed, build_s, base, name = sys.argv[1:]
url = f"http://127.0.0.1:{port}"


def call(path, body=None, token=None, timeout=120):
    req = urllib.request.Request(url + path, data=None if body is None else json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    if token:
        req.add_header("authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def logs():
    return subprocess.run(["podman", "logs", "--tail", "30", name], capture_output=True, text=True).stderr


def fail(message):
    print(logs(), file=sys.stderr)
    sys.exit(f"image-test: {message}")


# Ready: /health 200 (503 while the model loads and the self-check runs). Generous: a busy
# 2-core machine can take minutes where an idle one takes seconds.
deadline = time.time() + 300
while True:
    state = subprocess.run(["podman", "inspect", "--format", "{{.State.Status}}", name],
                           capture_output=True, text=True).stdout.strip()
    if state not in ("running", "created", "configured"):
        fail(f"the container stopped before it was ready ({state})")
    try:
        status, health = call("/health", timeout=5)
        if status == 200:
            break
    except OSError:
        pass
    if time.time() > deadline:
        fail("not ready within 300 s")
    time.sleep(0.2)
ready_s = time.time() - float(run_started)

request = {
    "model": health["model"],
    "input": "I was charged twice this month. Please refund the extra charge.",
    "questions": [
        {"type": "predicate", "name": "refund", "instructions": "The customer asks for a refund."},
        {"type": "choice", "name": "team", "instructions": "Which team owns this ticket?",
         "choices": [{"value": "billing"}, {"value": "shipping"}, {"value": "technical"}]},
    ],
}
sent = time.time()
status, answer = call("/v1/decisions", request, token=key)
first_answer_s = time.time() - float(run_started)
decision_s = time.time() - sent
if status != 200:
    fail(f"the decision request got {status}: {answer}")
refund, team = answer["answers"]
if not 0.0 < refund["probability"] < 1.0:
    fail(f"refund probability {refund['probability']}")
probabilities = {p["value"]: p["probability"] for p in team["probabilities"]}
if set(probabilities) != {"billing", "shipping", "technical"} or abs(sum(probabilities.values()) - 1) > 1e-6:
    fail(f"team probabilities {probabilities}")
if team["choice"] != max(probabilities, key=probabilities.get):
    fail(f"team choice {team['choice']} is not the most probable of {probabilities}")
print(f"ok: a decision through the container in {decision_s:.2f} s: refund p={refund['probability']:.3f}, "
      f"team={team['choice']} {json.dumps({k: round(v, 3) for k, v in probabilities.items()})}")

status, refused = call("/v1/decisions", request, token=None)
if status != 401:
    fail(f"a request without the key got {status}, not 401")
print("ok: a request without the key is refused (401)")

checked = subprocess.run(["podman", "healthcheck", "run", name], capture_output=True, text=True)
if checked.returncode != 0:
    fail(f"the image's HEALTHCHECK failed: {checked.stdout}{checked.stderr}")
print("ok: the image's HEALTHCHECK (curl /health inside the container) passes")

subprocess.run(["podman", "stop", "-t", "60", name], check=True, capture_output=True)
code = subprocess.run(["podman", "inspect", "--format", "{{.State.ExitCode}}", name],
                      capture_output=True, text=True).stdout.strip()
if code != "0" or "drained" not in logs():
    fail(f"SIGTERM: exit code {code}, not a drained exit 0")
print("ok: SIGTERM drains and exits 0")

result = {
    "image": image,
    "base_image": base,
    "dockerfile": "deploy/Dockerfile",
    "image_bytes": int(size),
    "image_gzip_bytes": int(compressed),
    "build_s": float(build_s),
    "start_to_ready_s": round(ready_s, 2),
    "start_to_first_answer_s": round(first_answer_s, 2),
    "first_decision_s": round(decision_s, 3),
    "model": health.get("model"),
    "forward": health.get("forward"),
    "podman": subprocess.run(["podman", "--version"], capture_output=True, text=True).stdout.split()[-1],
    "answers": {"refund": refund["probability"], "team": probabilities},
}
with open(report, "w") as f:
    json.dump(result, f, indent=2)
print(f"image: {int(size) / 1e6:.0f} MB ({int(compressed) / 1e6:.0f} MB gzipped), built in {build_s} s; "
      f"start to ready {ready_s:.1f} s, to first answer {first_answer_s:.1f} s ({report})")
print(f"image: 5 passed, 0 failed in {time.time() - float(run_started) + float(build_s):.0f}s")
PY
