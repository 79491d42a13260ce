#!/usr/bin/env bash
# Validates the Kubernetes manifests in deploy/k8s offline against the Kubernetes API schemas
# bundled in kubernetes-validate (PyPI), strictly (an unknown field fails), and the HAProxy
# configuration they carry with `haproxy -c`. First proves the validator is real: a manifest
# with a wrong type must fail.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

version=1.33.0
python3 -m pip install --quiet --disable-pip-version-check kubernetes-validate==1.37.0 2>&1 | grep -v "^WARNING: Running pip as" || true
validate() { kubernetes-validate --strict --quiet -k "$version" "$@"; }

broken="$(mktemp --suffix=.yaml)"
trap 'rm -f "$broken"' EXIT
sed 's/^  replicas: 3$/  replicas: three/' deploy/k8s/decide.yaml >"$broken"
if validate "$broken" >/dev/null 2>&1; then
    echo "deploy/validate.sh: kubernetes-validate accepted a StatefulSet with replicas: three" >&2
    exit 1
fi
echo "ok: a broken manifest (replicas: three) is refused"

validate deploy/k8s/*.yaml
echo "ok: deploy/k8s/*.yaml are valid Kubernetes $version objects"

if command -v haproxy >/dev/null; then
    python3 - "$broken" <<'PY'
import sys, yaml
docs = yaml.safe_load_all(open("deploy/k8s/haproxy.yaml"))
config = next(d for d in docs if d and d["kind"] == "ConfigMap")["data"]["haproxy.cfg"]
open(sys.argv[1], "w").write(config)
PY
    haproxy -c -q -f "$broken"
    echo "ok: the HAProxy configuration in deploy/k8s/haproxy.yaml is valid ($(haproxy -v | head -1 | awk '{print $3}'))"
fi
echo "deploy: 3 passed, 0 failed in ${SECONDS}s"
