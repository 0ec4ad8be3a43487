#!/usr/bin/env bash
# Builds the real control plane `make e2e` runs, from the Go modules pinned
# under tools/ (Go module proxy): no container runtime, no download of a
# prebuilt binary. A binary is rebuilt only when its pins change.
#
# Usage: hack/e2e/build-tools.sh OUTDIR [PART ...]
# PART is `common` (etcd, Crossplane, crane, provider-kubernetes at each
# release the e2e runs, KWOK, cert-manager and their CRDs), `crds` (those
# CRDs alone, from the modules: the unit tests validate against them) or
# `kube-1.NN` (one minor's control plane, and kubectl with the newest); none
# means all but `crds`.
# Parts build side by side (hack/stages.py), so a control plane can start
# while the other minor still compiles.
set -euo pipefail
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
cd "$(dirname "$0")/../.."
out=$(mkdir -p "$1" && cd "$1" && pwd)
shift
parts=("$@")
if [ ${#parts[@]} -eq 0 ]; then
  parts=(common)
  for dir in tools/kube-*; do parts+=("${dir#tools/}"); done
fi

# build MODULE_DIR OUTPUT PACKAGE [LDFLAGS [MODFILE]]: go build unless OUTPUT is
# newer than every file of the module folder (its pins and any source of ours)
# and than this script (its flags). With MODFILE (a go.*.mod in that folder),
# go build reads it in place of go.mod, and only it, its go.*.sum, the
# folder's Go sources and the folders it replaces a module with (a stand-in
# such as tools/provider-kubernetes/nebius-gosdk) count.
build() {
  local dir=$1 target=$2 pkg=$3 ldflags=${4:-} modfile=${5:-} local_replace
  local deps=("$dir")
  if [ -n "$modfile" ]; then
    deps=("$dir/$modfile" "$dir/${modfile%.mod}.sum" "$dir"/*.go)
    for local_replace in $(sed -n 's#^replace .* => \(\./[^ ]*\)$#\1#p' "$dir/$modfile"); do
      deps+=("$dir/$local_replace")
    done
  fi
  if [ -x "$target" ] && [ -z "$(find "${deps[@]}" "$self" -type f -newer "$target")" ]; then
    return
  fi
  echo "building $target" >&2
  mkdir -p "$(dirname "$target")"
  (cd "$dir" && go build ${modfile:+-modfile="$modfile"} -trimpath -ldflags "-s -w $ldflags" -o "$target" "$pkg")
}

pinned() { # pinned MODULE_DIR MODULE: the version go.mod requires
  sed -n "s#^[[:space:]]*\(require \)\{0,1\}$2 \(v[^ ]*\).*#\2#p" "$1/go.mod" | head -n 1
}

# kube_flags MODULE_DIR: the version stamp `kube-apiserver --version` reports.
kube_flags() {
  local version minor
  version=$(pinned "$1" k8s.io/kubernetes)
  minor=${version#v1.}; minor=${minor%%.*}
  echo "-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1" \
    "-X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
}

kube() { # kube MODULE_DIR: one minor's control plane
  local dir=$1 flags minor
  flags=$(kube_flags "$dir")
  minor=${dir#tools/kube-}
  for component in kube-apiserver kube-controller-manager kube-scheduler; do
    build "$dir" "$out/kube-$minor/$component" "k8s.io/kubernetes/cmd/$component" "$flags"
  done
  # kubectl from the newest release: it speaks to every older supported server.
  if [ "$dir" = "$(newest)" ]; then
    build "$dir" "$out/kubectl" k8s.io/kubernetes/cmd/kubectl "$flags"
  fi
}

newest() { ls -d tools/kube-* | sort -t. -k2 -n | tail -n 1; }

# The provider-kubernetes releases the e2e runs (hack/pins.py): go.mod's, the
# oldest the Configuration accepts, and each newer one's go.v1.N.mod.
provider_modfiles() { echo go.mod; (cd tools/provider-kubernetes && ls go.v*.mod 2>/dev/null || true); }
# provider_suffix MODFILE: what names that release's binary and CRDs ("" for go.mod, "-v1.N").
provider_suffix() { local label=${1#go.}; label=${label%.mod}; [ "$1" = go.mod ] || echo "-$label"; }

common() {
  local crossplane
  build tools/etcd "$out/etcd" go.etcd.io/etcd/server/v3
  crossplane=$(pinned tools/crossplane github.com/crossplane/crossplane/v2)
  build tools/crossplane "$out/crossplane" github.com/crossplane/crossplane/v2/cmd/crossplane \
    "-X github.com/crossplane/crossplane-runtime/v2/pkg/version.version=$crossplane"
  build tools/crossplane "$out/crane" github.com/google/go-containerregistry/cmd/crane
  for modfile in $(provider_modfiles); do
    build tools/provider-kubernetes "$out/provider-kubernetes$(provider_suffix "$modfile")" \
      github.com/crossplane-contrib/provider-kubernetes/cmd/provider "" "$modfile"
  done
  build tools/kwok "$out/kwok" sigs.k8s.io/kwok/cmd/kwok
  build tools/kwok "$out/kwokctl" sigs.k8s.io/kwok/cmd/kwokctl
  build tools/crossplane "$out/cert-manager" ./certmanager
  crds
}

crds() { # the CRDs of the pinned Crossplane, provider-kubernetes and cert-manager
  local provider core certmanager modfile dest
  # provider-kubernetes' CRDs ship in its module: each release's own (their
  # schemas differ), in provider-crds and provider-crds-v1.N.
  rm -rf "$out"/provider-crds-*
  for modfile in $(provider_modfiles); do
    (cd tools/provider-kubernetes && go mod download -modfile="$modfile" github.com/crossplane-contrib/provider-kubernetes)
    provider=$(cd tools/provider-kubernetes \
      && go list -modfile="$modfile" -m -f '{{.Dir}}' github.com/crossplane-contrib/provider-kubernetes)
    dest="$out/provider-crds$(provider_suffix "$modfile")"
    rm -rf "$dest" && cp -r "$provider/package/crds" "$dest" && chmod -R u+w "$dest"
  done
  (cd tools/crossplane && go mod download github.com/crossplane/crossplane/v2)
  (cd tools/crossplane && go mod download github.com/cert-manager/cert-manager)
  # Crossplane's CRDs ship in its module (cluster/crds).
  core=$(cd tools/crossplane && go list -m -f '{{.Dir}}' github.com/crossplane/crossplane/v2)
  rm -rf "$out/crossplane-crds" && cp -r "$core/cluster/crds" "$out/crossplane-crds" && chmod -R u+w "$out/crossplane-crds"
  # cert-manager's CRDs ship in its module (deploy/crds).
  certmanager=$(cd tools/crossplane && go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)
  rm -rf "$out/cert-manager-crds" && cp -r "$certmanager/deploy/crds" "$out/cert-manager-crds" \
    && chmod -R u+w "$out/cert-manager-crds"
}

for part in "${parts[@]}"; do
  case $part in
    common) common ;;
    crds) crds ;;
    kube-1.*) [ -d "tools/$part" ] || { echo "no tools/$part" >&2; exit 2; }; kube "tools/$part" ;;
    *) echo "unknown part $part: common, crds or kube-1.NN" >&2; exit 2 ;;
  esac
done
echo "e2e tools ready in $out" >&2
