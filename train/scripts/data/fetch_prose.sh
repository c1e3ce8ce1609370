#!/usr/bin/env bash
# Prose for the lab's corpus: the text files (*.rst, *.txt, *.md) of Debian documentation packages, one folder per
# package under DEST (DEST/git-doc/usr/share/doc/git-doc/git-add.txt, …), for `corpus --prose DEST/PKG`.
#   bash train/scripts/data/fetch_prose.sh DEST PKG...     e.g.  bash train/scripts/data/fetch_prose.sh train/.cache/prose git-doc
# Idempotent: a package whose folder is complete (DEST/PKG/.fetched) is skipped; a folder appears only once complete.
# Needs apt-get's package lists (`apt-get update` once) and dpkg. Debian gzips documentation over 4 kB, so *.rst.gz,
# *.txt.gz and *.md.gz are unpacked; identical files are kept once, the first path in C order (linux-doc ships every
# .rst twice: Documentation/*.rst and html/_sources/*.rst.txt).
set -euo pipefail
usage="usage: fetch_prose.sh DEST PKG... (e.g. fetch_prose.sh train/.cache/prose git-doc)"
[ $# -ge 2 ] || { echo "$usage" >&2; exit 2; }
mkdir -p "$1"
dest=$(cd "$1" && pwd); shift  # absolute: the download runs in a temp dir
work=
trap '[ -z "$work" ] || rm -rf "$work"' EXIT
for pkg in "$@"; do
  if [ -f "$dest/$pkg/.fetched" ]; then
    echo "fetch_prose: $pkg: already in $dest/$pkg"
    continue
  fi
  work=$(mktemp -d "$dest/.$pkg.XXXXXX")
  if ! (cd "$work" && apt-get download -q "$pkg" >/dev/null 2>"$work/apt.log"); then
    cat "$work/apt.log" >&2
    echo "fetch_prose: apt-get download $pkg failed (package lists missing? run apt-get update)" >&2
    exit 1
  fi
  deb=$(find "$work" -maxdepth 1 -name '*.deb' | head -1)
  dpkg -x "$deb" "$work/root"
  mkdir "$work/out"
  # -type f: symlinks (python3.11-doc links its html tree into devhelp) would only repeat files.
  (cd "$work/root" && find . -type f \( -name '*.rst' -o -name '*.txt' -o -name '*.md' \
      -o -name '*.rst.gz' -o -name '*.txt.gz' -o -name '*.md.gz' \) -print0) |
    while IFS= read -r -d '' rel; do
      target="$work/out/${rel#./}"
      mkdir -p "$(dirname "$target")"
      case "$rel" in
        *.gz) gzip -dc "$work/root/$rel" > "${target%.gz}" ;;
        *) cp "$work/root/$rel" "$target" ;;
      esac
    done
  declare -A seen=()
  kept=0 dropped=0
  while IFS= read -r -d '' record; do  # sha256sum -z: "HASH  PATH\0", paths unescaped
    hash=${record:0:64} path=$work/out/${record:66}
    if [ -n "${seen[$hash]:-}" ]; then rm "$path"; dropped=$((dropped + 1)); else seen[$hash]=1; kept=$((kept + 1)); fi
  done < <(cd "$work/out" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum -z)
  unset seen
  find "$work/out" -type d -empty -delete
  printf '%s\n' "package: $pkg" "deb: $(basename "$deb")" "deb_sha256: $(sha256sum "$deb" | cut -c1-64)" \
    "text_files: $kept" "duplicates_dropped: $dropped" > "$work/out/.fetched"
  rm -rf "${dest:?}/$pkg"
  mv "$work/out" "$dest/$pkg"
  rm -rf "$work"
  work=
  echo "fetch_prose: $pkg: $kept text files ($(du -sh "$dest/$pkg" | cut -f1)) in $dest/$pkg; $dropped duplicates dropped"
done
