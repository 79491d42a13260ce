#!/usr/bin/env bash
# Renders the Helm chart deploy/helm/decide as `helm template decide deploy/helm/decide` does, with
# deploy/helm/render (Go's text/template and sprig, which helm's engine is made of; no helm binary
# can be installed from the registries this project's machines reach). Builds the renderer first,
# offline, from Debian's Go packages (installed with apt-get when missing; ~5 s to build).
#
#     deploy/helm/render.sh [-f VALUES.yaml]... OUT_DIR   the chart's templates, one file each, in OUT_DIR
#     deploy/helm/render.sh --k8s                         writes deploy/k8s/ from the chart's defaults
#     deploy/helm/render.sh --check                       fails when deploy/k8s/ is not what --k8s writes
#
# deploy/k8s/ is the chart rendered with its defaults (release `decide`), so the plain manifests
# and the chart cannot drift apart: change the chart, then run --k8s. (Trailing blanks that
# nindent leaves on empty lines are removed there; YAML reads the same.)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

chart=deploy/helm/decide
bin=target/helm-render/render
if [[ ! -x "$bin" || deploy/helm/render/main.go -nt "$bin" ]]; then
    if ! command -v go >/dev/null || [[ ! -d /usr/share/gocode/src/github.com/Masterminds/sprig ]] \
        || [[ ! -d /usr/share/gocode/src/gopkg.in/yaml.v2 ]]; then
        echo "render: installing Go, sprig and yaml.v2 (Debian packages)" >&2
        apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
            golang-go golang-github-masterminds-sprig-dev golang-gopkg-yaml.v2-dev >/dev/null
    fi
    mkdir -p "$(dirname "$bin")"
    # GOPATH mode over Debian's Go sources: nothing is downloaded.
    GO111MODULE=off GOPATH=/usr/share/gocode GOCACHE="$PWD/target/helm-render/gocache" GOFLAGS= \
        go build -o "$bin" deploy/helm/render/main.go
fi

# k8s DIR: the chart's defaults as deploy/k8s/ holds them, each file headed by where it comes from.
k8s() {
    local raw
    raw="$(mktemp -d)"
    "$bin" -name decide "$chart" "$raw"
    for f in "$raw"/*.yaml; do
        {
            echo "# Rendered from the Helm chart deploy/helm/decide with its default values (release"
            echo "# \`decide\`) by deploy/helm/render.sh --k8s: change the chart, then run that."
            sed 's/[[:space:]]*$//' "$f"
        } >"$1/$(basename "$f")"
    done
    rm -rf "$raw"
}

case "${1:-}" in
    --k8s)
        rm -f deploy/k8s/*.yaml
        k8s deploy/k8s
        echo "render: wrote $(ls deploy/k8s/*.yaml | tr '\n' ' ')"
        ;;
    --check)
        want="$(mktemp -d)"
        trap 'rm -rf "$want"' EXIT
        k8s "$want"
        if ! diff -ru deploy/k8s "$want" >&2; then
            echo "render: deploy/k8s/ is not the chart's defaults (above: - deploy/k8s, + the chart); run deploy/helm/render.sh --k8s" >&2
            exit 1
        fi
        echo "ok: deploy/k8s/ is the chart rendered with its defaults"
        ;;
    "" | -h | --help)
        sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
        exit 2
        ;;
    *)
        args=()
        while [[ "${1:-}" == -f ]]; do
            args+=(-f "$2")
            shift 2
        done
        [[ $# == 1 ]] || { echo "usage: deploy/helm/render.sh [-f VALUES.yaml]... OUT_DIR" >&2; exit 2; }
        "$bin" -name decide "${args[@]}" "$chart" "$1"
        ;;
esac
