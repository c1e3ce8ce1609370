#!/usr/bin/env bash
# Stages Debian's HAProxy for GPU jobs (bench/gpu/replicas.sh): the GPU machine has neither HAProxy nor a network, so
# the job brings the binary of this machine's `apt-get install haproxy` and every shared library it loads except
# glibc's own (the GPU machine's newer glibc runs a binary built against Debian 12's 2.36), as .gpu-haproxy/haproxy.tar.xz.
# On the GPU machine `tar xJf .gpu-haproxy/haproxy.tar.xz -C /tmp` gives /tmp/haproxy/haproxy, a wrapper that points
# the dynamic loader at its own lib/ folder. Run from the repository root:  bash bench/gpu/stage-haproxy.sh
set -euo pipefail
dest=${1:-.gpu-haproxy}
bin=$(command -v haproxy) || { echo "stage-haproxy.sh: no haproxy here: apt-get install -y haproxy" >&2; exit 2; }
work=$(mktemp -d)
mkdir -p "$work/haproxy/lib" "$dest"
cp "$(readlink -f "$bin")" "$work/haproxy/haproxy.bin"
ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) ;;  # glibc: the GPU machine's own
    *) cp -L "$lib" "$work/haproxy/lib/" ;;
  esac
done
cat > "$work/haproxy/haproxy" <<'SH'
#!/bin/sh
# Debian's haproxy with the libraries staged next to it (bench/gpu/stage-haproxy.sh); the master process re-executes
# haproxy.bin on a reload with this environment, so a reload finds them too.
here=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$here/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/haproxy.bin" "$@"
SH
chmod +x "$work/haproxy/haproxy"
"$work/haproxy/haproxy" -v | head -1
tar -C "$work" -cf - haproxy | xz -T0 -9 > "$dest/haproxy.tar.xz"
rm -rf "$work"
du -sh "$dest/haproxy.tar.xz"
