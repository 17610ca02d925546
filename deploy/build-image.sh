#!/usr/bin/env bash
# Builds the node daemon's OCI image from the wheel `make wheel` writes to
# dist/, with Debian-packaged tools and no container daemon or base image:
#
#   1. mmdebstrap makes a Debian bookworm root file system with python3 (3.11),
#      libstdc++ (grpcio's and google-re2's native code needs it) and CA
#      certificates (from the Debian mirror, like any apt install);
#   2. pip installs the wheel and its dependencies (binary wheels for CPython
#      3.11 on glibc 2.36, from the package index) into that root's
#      /usr/local/lib/python3.11/dist-packages, and `dra-gpu` goes to
#      /usr/local/bin;
#   3. buildah turns the root into a one-layer image with the entry point
#      `dra-gpu`, runs `dra-gpu --help` in it, and writes it to local
#      container storage as $IMAGE and to dist/ as an OCI archive.
#
# Only the wheel's files and its dependencies are installed: no source tree,
# no tests. NVML (libnvidia-ml.so.1) and the driver's binaries come from the
# host's driver root at run time (mounted at /driver-root), not from the image.
#
# Needs root (mmdebstrap's root mode, buildah's storage): `sudo make image`.
# Environment: PYTHON (runs pip), IMAGE (repository:tag), WHEEL, OUT (the
# archive), SUITE (default bookworm), MIRROR (default: the system's apt source).
set -euo pipefail

: "${PYTHON:?set PYTHON to a Python with pip}"
: "${IMAGE:?set IMAGE, e.g. ghcr.io/dra-gpu/dra-gpu:0.1.0}"
: "${WHEEL:?set WHEEL to the dra-gpu wheel}"
: "${OUT:?set OUT to the OCI archive to write}"
SUITE="${SUITE:-bookworm}"
PY_VERSION=3.11   # bookworm's python3
GLIBC=2_36        # bookworm's glibc

fail() { echo "make image: $*" >&2; exit 2; }
# Byte-code next to the sources, where the image's Python looks: a PYTHONPYCACHEPREFIX
# of this machine (the Makefile sets one) reaches every Python run in the new root
# (dpkg's py3compile, compileall) and put a 73 MB tree at this machine's path into
# the image, and no byte-code where it is read.
unset PYTHONPYCACHEPREFIX
# `buildah run` (the smoke test) in a chroot: works in containers and CI runners.
export BUILDAH_ISOLATION="${BUILDAH_ISOLATION:-chroot}"

for tool in mmdebstrap buildah; do
    command -v "$tool" >/dev/null ||
        fail "needs $tool (Debian/Ubuntu: apt-get install mmdebstrap buildah)"
done
ARCH="$(uname -m)"
[ "$(id -u)" = 0 ] || fail "needs root for mmdebstrap and buildah storage (sudo make image)"
[ -f "$WHEEL" ] || fail "no wheel at $WHEEL (make wheel)"
WHEEL="$(realpath "$WHEEL")"

work="$(mktemp -d /tmp/dra-gpu-image.XXXXXX)"
container=""
cleanup() {
    [ -z "$container" ] || buildah rm "$container" >/dev/null 2>&1 || true
    rm -rf "$work"
}
trap cleanup EXIT

site="/usr/local/lib/python${PY_VERSION}/dist-packages"
# Binary wheels for the image's Python and glibc (pip takes each manylinux tag
# it may use explicitly), fetched first: a missing one fails here, in seconds.
target=(--only-binary=:all: --python-version "$PY_VERSION" --implementation cp
        --abi "cp${PY_VERSION/./}" --platform "manylinux2014_${ARCH}")
for minor in $(seq 5 "${GLIBC#2_}"); do target+=(--platform "manylinux_2_${minor}_${ARCH}"); done
"$PYTHON" -m pip download --quiet "${target[@]}" --dest "$work/wheels" "$WHEEL" ||
    fail "cannot fetch the wheel's dependencies for CPython $PY_VERSION (see pip's error above)"
# The hooks run on this machine with the new root as $1.
# The test suites some dependencies ship (jsonschema, referencing, websocket...) go:
# the image carries no test code (`make image-test` checks).
install_wheel="'$PYTHON' -m pip install --quiet --no-compile --no-index \
    --find-links '$work/wheels' ${target[*]} --target \"\$1$site\" '$WHEEL' \
    && rm -rf \"\$1$site/bin\" \
    && find \"\$1$site\" -mindepth 2 -type d \\( -name tests -o -name test \\) -prune \
        -exec rm -rf {} +"
entry_point="printf '%s\n' '#!/usr/bin/python3' 'import sys' 'from dra_driver.cli import main' \
    'sys.exit(main())' > \"\$1/usr/local/bin/dra-gpu\" && chmod 0755 \"\$1/usr/local/bin/dra-gpu\""
compile="chroot \"\$1\" python3 -m compileall -q '$site'"

mmdebstrap \
    --variant=essential \
    --include=python3,libstdc++6,ca-certificates \
    --dpkgopt='path-exclude=/usr/share/doc/*' \
    --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' \
    --customize-hook="$install_wheel" \
    --customize-hook="$entry_point" \
    --customize-hook="$compile" \
    --customize-hook='rm -rf "$1"/var/lib/apt/lists/* "$1"/var/cache/*' \
    "$SUITE" "$work/rootfs.tar" ${MIRROR:+"$MIRROR"}

version="${IMAGE##*:}"
container="$(buildah from scratch)"
buildah add --quiet "$container" "$work/rootfs.tar" /
buildah config \
    --entrypoint '["dra-gpu"]' \
    --cmd '["kubelet-plugin", "--help"]' \
    --user 0:0 \
    --workingdir / \
    --env PYTHONUNBUFFERED=1 \
    --label org.opencontainers.image.title=dra-gpu \
    --label org.opencontainers.image.description="DRA driver for NVIDIA GPUs: the node daemon" \
    --label org.opencontainers.image.version="$version" \
    --label org.opencontainers.image.source=https://github.com/dra-gpu/dra-gpu \
    "$container"
buildah commit --quiet --rm "$container" "$IMAGE" >/dev/null
container=""

# The image runs: the entry point imports the whole daemon.
check="$(buildah from "$IMAGE")"
container="$check"
buildah run "$check" -- dra-gpu --help >/dev/null ||
    fail "the image does not run: dra-gpu --help failed"
buildah run "$check" -- python3 -c 'import kubelet_plugin.main, dra_driver.scheduling.cel' ||
    fail "the image does not run: the daemon's modules do not import"
buildah rm "$check" >/dev/null
container=""

mkdir -p "$(dirname "$OUT")"
rm -f "$OUT"
buildah push --quiet "$IMAGE" "oci-archive:$OUT:$IMAGE"
echo "make image: $IMAGE in local container storage and $OUT ($(du -h "$OUT" | cut -f1))"
