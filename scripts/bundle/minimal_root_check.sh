#!/usr/bin/env bash
# Checks ein's GPU bundle (scripts/gpu_bundle.sh) in a minimal Debian root file system, as on a
# bare machine: `debootstrap --variant=minbase` (essential packages and apt only: glibc,
# libstdc++, no compiler, no headers, none of ein's libraries), entered with chroot, with a fresh
# copy of the bundle at /opt/ein-gpu running its check_cpu.sh (run.sh --check-cpu).
#   bash scripts/bundle/minimal_root_check.sh [BUNDLE_DIR]     (default dist/ein-gpu)
# Needs root (chroot, mount) and debootstrap (scripts/install_deps.sh). The root is made once
# (about 30 s, 200 MB) and kept in ~/.cache/ein/minbase-<suite>/.
set -euo pipefail
dist=$(cd "${1:-dist/ein-gpu}" && pwd)
suite=$(. /etc/os-release && echo "${VERSION_CODENAME:-bookworm}")
base=${XDG_CACHE_HOME:-$HOME/.cache}/ein/minbase-$suite
if [ "$(id -u)" -ne 0 ]; then  # as scripts/install_deps.sh: sudo where it needs no password
  sudo -n true 2>/dev/null && exec sudo -n bash "$0" "$dist"
  echo "minimal_root_check.sh: needs root or password-less sudo (debootstrap, chroot, mount)" >&2
  exit 1
fi
command -v debootstrap >/dev/null ||
  { echo "minimal_root_check.sh: needs debootstrap (scripts/install_deps.sh installs it)" >&2; exit 1; }
if [ ! -f "$base/.complete" ]; then
  echo "minimal_root_check.sh: debootstrap --variant=minbase $suite into $base"
  rm -rf "$base"
  mkdir -p "$base"
  # One retry: a download can fail once on a busy mirror.
  debootstrap --variant=minbase "$suite" "$base" http://deb.debian.org/debian >"$base.log" 2>&1 ||
    { rm -rf "$base" && mkdir -p "$base" &&
      debootstrap --variant=minbase "$suite" "$base" http://deb.debian.org/debian >"$base.log" 2>&1; } ||
    { tail -n 20 "$base.log"; exit 1; }
  touch "$base/.complete"
fi
# What the root holds: no development package, no compiler.
dev=$(chroot "$base" dpkg-query -W -f '${Package}\n' |
      grep -E -- '-dev$|^(gcc|g\+\+|cpp|clang|llvm)(-[0-9]+)?$|^(libllvm|libmlir|libopenblas|libtbb|libfmt|libsleef)' ||
      true)
[ -z "$dev" ] || { echo "minimal_root_check.sh: the root has development packages: $dev" >&2; exit 1; }
compilers=$(chroot "$base" /bin/sh -c 'for c in cc c++ gcc g++ clang nvcc; do command -v $c; done' || true)
[ -z "$compilers" ] || { echo "minimal_root_check.sh: the root has a compiler: $compilers" >&2; exit 1; }
echo "minimal_root_check.sh: $base: $(chroot "$base" dpkg-query -W -f '.\n' | wc -l) packages" \
     "(Debian $suite minbase), none of them -dev, no compiler on PATH"
rm -rf "$base/opt/ein-gpu" "$base/root/.cache"  # a fresh bundle, an empty JIT cache
mkdir -p "$base/opt"
cp -r "$dist" "$base/opt/ein-gpu"
rm -rf "$base/opt/ein-gpu/root"
mount -t proc proc "$base/proc"
trap 'umount "$base/proc"' EXIT
env -i HOME=/root LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  chroot "$base" /bin/bash /opt/ein-gpu/run.sh --check-cpu
