#!/usr/bin/env bash
# Makes a Debian bookworm base image without an image registry: `debootstrap --variant=minbase`
# from the Debian mirror apt already uses here, slimmed the way Docker's debian:bookworm-slim is
# (no documentation, man pages, locales or apt lists, and dpkg told to keep leaving them out
# of packages installed later), then imported into podman's local storage as IMAGE. CI builds
# deploy/Dockerfile on it (BASE_IMAGE), since debian:bookworm-slim cannot be pulled here.
#
#     deploy/debian-base.sh [IMAGE]      (default localhost/decide-debian-base:bookworm)
#
# Reuses IMAGE when podman already has one made in the last 7 days (DECIDE_BASE_MAX_AGE_DAYS),
# so a machine that runs CI often does not bootstrap every time; older ones are made again to
# pick up Debian's security updates. Needs root, debootstrap and podman (installed with apt-get
# when missing). Takes ~40 s of mostly downloading.
set -euo pipefail

image="${1:-localhost/decide-debian-base:bookworm}"
max_age_days="${DECIDE_BASE_MAX_AGE_DAYS:-7}"

need=()
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v podman >/dev/null || need+=(podman)
if ((${#need[@]})); then
    echo "debian-base: installing ${need[*]} (Debian packages)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

old_id=""
if created="$(podman image inspect --format '{{.Created.Unix}}' "$image" 2>/dev/null)"; then
    old_id="$(podman image inspect --format '{{.Id}}' "$image")"
    age_days=$((($(date +%s) - created) / 86400))
    if ((age_days < max_age_days)); then
        echo "debian-base: reusing $image (made $age_days day(s) ago)" >&2
        exit 0
    fi
    echo "debian-base: $image is $age_days day(s) old; making it again" >&2
fi

# The mirror apt is set up with here (deb822 sources or the one-line format), else debootstrap's own.
mirror="$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)"
[[ -n "$mirror" ]] || mirror="$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list 2>/dev/null || true)"

work="$(mktemp -d /var/tmp/decide-base.XXXXXX)"
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"
started=$SECONDS
echo "debian-base: debootstrap --variant=minbase bookworm ${mirror:-"(the default mirror)"}" >&2
if ! debootstrap --variant=minbase bookworm "$root" ${mirror:+"$mirror"} >"$work/debootstrap.log" 2>&1; then
    tail -20 "$work/debootstrap.log" >&2
    exit 1
fi

# As debian:bookworm-slim: dpkg leaves documentation, man pages and translations out (copyright
# files stay), and what debootstrap already unpacked of them goes.
cat >"$root/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
EOF
find "$root/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$root"/usr/share/{man,groff,info,lintian,linda,locale}/*
# apt in a container: no package cache kept, no translations fetched.
cat >"$root/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";
EOF
echo 'Acquire::Languages "none";' >"$root/etc/apt/apt.conf.d/docker-no-languages"
# The image's apt sources: the release, its updates and its security updates, on the same mirror.
if [[ -n "$mirror" ]]; then
    security="$(awk '/^URIs:/ && $2 ~ /security/ {print $2; exit}' /etc/apt/sources.list.d/*.sources 2>/dev/null || true)"
    {
        echo "deb $mirror bookworm main"
        echo "deb $mirror bookworm-updates main"
        [[ -z "$security" ]] || echo "deb $security bookworm-security main"
    } >"$root/etc/apt/sources.list"
fi
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/log/*.log "$root"/tmp/*
# No machine identity baked in (systemd-style images leave it empty).
: >"$root/etc/machine-id"

tar -C "$root" --numeric-owner -c . |
    podman import --quiet --change 'CMD ["bash"]' --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --message "debootstrap --variant=minbase bookworm (deploy/debian-base.sh)" - "$image" >/dev/null
# The one it replaces, unless an image still built on it keeps it.
[[ -z "$old_id" ]] || podman rmi "$old_id" >/dev/null 2>&1 || true
echo "debian-base: $image made in $((SECONDS - started)) s ($(podman image inspect --format '{{.Size}}' "$image" | awk '{printf "%.0f MB", $1 / 1e6}'))" >&2
