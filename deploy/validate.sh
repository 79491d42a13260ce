#!/usr/bin/env bash
# Validates the deployment offline: the Kubernetes manifests in deploy/k8s and the Helm chart
# deploy/helm/decide against the Kubernetes API schemas bundled in kubernetes-validate (PyPI),
# strictly (an unknown field fails), and the HAProxy configuration they carry with `haproxy -c`.
# First proves the validator is real: a manifest with a wrong type must fail. Then:
#   - deploy/k8s/ is the chart rendered with its defaults (deploy/helm/render.sh --check), so the
#     plain manifests and the chart cannot drift apart;
#   - the chart rendered with each example values file (deploy/helm/decide/ci/*.yaml) validates too,
#     and a value the chart requires, left empty, stops the rendering;
#   - deploy/Dockerfile.cuda is in step with deploy/Dockerfile: their stages after `source` are the
#     same but for the base's description, DECIDE_DEVICE and the health check's start period;
#   - where `helm` is installed (it is not on this project's machines), `helm lint` and
#     `helm template` of the chart, validated the same way.
# The chart is rendered by deploy/helm/render.sh (Go's text/template and sprig from Debian's
# packages, as helm's engine); the first run installs Go and builds it (~30 s).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

version=1.33.0
python3 -m pip install --quiet --disable-pip-version-check kubernetes-validate==1.37.0 2>&1 | grep -v "^WARNING: Running pip as" || true
validate() { kubernetes-validate --strict --quiet -k "$version" "$@"; }
passed=0

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
broken="$work/broken.yaml"
sed 's/^  replicas: 3$/  replicas: three/' deploy/k8s/decide.yaml >"$broken"
if validate "$broken" >/dev/null 2>&1; then
    echo "deploy/validate.sh: kubernetes-validate accepted a StatefulSet with replicas: three" >&2
    exit 1
fi
echo "ok: a broken manifest (replicas: three) is refused"
passed=$((passed + 1))

validate deploy/k8s/*.yaml
echo "ok: deploy/k8s/*.yaml are valid Kubernetes $version objects"
passed=$((passed + 1))

if command -v haproxy >/dev/null; then
    python3 - "$work/haproxy.cfg" <<'PY'
import sys, yaml
docs = yaml.safe_load_all(open("deploy/k8s/haproxy.yaml"))
config = next(d for d in docs if d and d["kind"] == "ConfigMap")["data"]["haproxy.cfg"]
open(sys.argv[1], "w").write(config)
PY
    haproxy -c -q -f "$work/haproxy.cfg"
    echo "ok: the HAProxy configuration in deploy/k8s/haproxy.yaml is valid ($(haproxy -v | head -1 | awk '{print $3}'))"
    passed=$((passed + 1))
fi

deploy/helm/render.sh --check
passed=$((passed + 1))

for values in deploy/helm/decide/ci/*.yaml; do
    out="$work/$(basename "$values" .yaml)"
    deploy/helm/render.sh -f "$values" "$out"
    validate "$out"/*.yaml
    echo "ok: the chart with $values renders valid Kubernetes $version objects ($(ls "$out" | tr '\n' ' '))"
    passed=$((passed + 1))
done

printf 'secrets:\n  adminKey: ""\n' >"$work/no-admin-key.yaml"
if deploy/helm/render.sh -f "$work/no-admin-key.yaml" "$work/no-admin-key" 2>"$work/no-admin-key.err"; then
    echo "deploy/validate.sh: the chart rendered without secrets.adminKey" >&2
    exit 1
fi
grep -q "secrets.adminKey is needed" "$work/no-admin-key.err"
echo "ok: the chart refuses to render without secrets.adminKey"
passed=$((passed + 1))

# The runtime stages of the two Dockerfiles, less comments and blank lines, the CUDA one's
# intended differences mapped to the CPU one's.
stages() {
    sed -n '/^FROM scratch AS prebuilt/,$p' "$1" | grep -v -e '^[[:space:]]*#' -e '^[[:space:]]*$' |
        sed -e 's/ DECIDE_DEVICE=cuda//' -e 's/(CUDA)/(CPU)/' -e 's/--start-period=600s/--start-period=300s/'
}
if ! diff <(stages deploy/Dockerfile) <(stages deploy/Dockerfile.cuda) >&2; then
    echo "deploy/validate.sh: deploy/Dockerfile.cuda's stages after 'source' differ from deploy/Dockerfile's (above: < CPU, > CUDA)" >&2
    exit 1
fi
echo "ok: deploy/Dockerfile.cuda is in step with deploy/Dockerfile (same stages after the build, user, paths, entrypoint)"
passed=$((passed + 1))

if command -v helm >/dev/null; then
    helm lint deploy/helm/decide
    helm template decide deploy/helm/decide >"$work/helm.yaml"
    validate "$work/helm.yaml"
    echo "ok: helm lint and helm template ($(helm version --short)) of the chart validate"
    passed=$((passed + 1))
fi
echo "deploy: $passed passed, 0 failed in ${SECONDS}s"
