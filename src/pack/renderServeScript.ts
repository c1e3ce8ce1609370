/**
 * serve.sh of a packed drafter folder: starts `specdraft serve` on this folder's model, on $PORT and $HOST (default:
 * serve's own, 127.0.0.1:8000), from wherever the folder is run. It never names a path of the machine that packed it.
 *
 * A bundled folder (`pack --bundle`) carries its runtime (bundleRuntime.ts): serve.sh unpacks the archive once into
 * $SPECDRAFT_RUNTIME_DIR (default ${TMPDIR:-/tmp}/specdraft-runtime-$UID), keyed by the archive's sha256, outside the
 * folder so that the folder stays as packed, and runs the bundled node on the bundled specdraft. It needs from the host
 * only bash, tar, xz (or python3), mkdir, mktemp, mv and rm.
 *
 * Otherwise specdraft must be on the host, found, in order, through
 *   1. $SPECDRAFT — a command, e.g. `specdraft` or `node /opt/specdraft/dist/cli/main.js`;
 *   2. `specdraft` on PATH;
 *   3. a specdraft checkout holding the folder (searched upwards): its dist/cli/main.js once built, else
 *      src/cli/main.ts through its tsx — both with node from PATH;
 *   4. `npx --no-install specdraft` (a locally installed package; never downloads);
 * and when none is there serve.sh says what is missing (node, specdraft) and exits 127.
 */

import { defaultHost, defaultPort } from "../server/serveDefaults.js";
import type { RuntimeDescription } from "./drafterFolder.js";

/** What serve.sh is written for. */
export interface ServeScriptOptions {
    /** The model's file name inside the folder. */
    modelFile: string;
    /** Tokens drafted when a request gives no n. */
    draftLength: number;
    /** Prompt-lookup candidates per drafter step (--lookahead), or null for serve's default. */
    lookahead: number | null;
    /** The bundled runtime, or null when specdraft comes from the host. */
    runtime: RuntimeDescription | null;
    /** specdraft's version, for the script's header. */
    specdraftVersion: string;
}

/** Characters of the archive's sha256 naming its unpacked folder. */
const runtimeKeyLength = 16;

/** The text of serve.sh. */
export function renderServeScript(options: ServeScriptOptions): string {
    const head = `#!/usr/bin/env bash
# Starts this drafter: \`specdraft serve\` on $PORT (default ${defaultPort}), host $HOST (default ${defaultHost}).
# Extra arguments go to \`specdraft serve\` (e.g. --gpu cuda --streams 64). Written by specdraft ${options.specdraftVersion} \`pack\`.
`;
    const setup = `set -euo pipefail
case "\${BASH_SOURCE[0]}" in */*) here="\${BASH_SOURCE[0]%/*}" ;; *) here=. ;; esac
here="$(cd "$here" && pwd)"
args=(serve --model "$here/${shellEscapeInner(options.modelFile)}" --port "\${PORT:-${defaultPort}}" --host "\${HOST:-${defaultHost}}" --draft-len ${options.draftLength}${options.lookahead === null ? "" : ` --lookahead ${options.lookahead}`} "$@")
`;
    return options.runtime === null
        ? head + installedComment + setup + installedBody
        : head + bundledComment(options.runtime) + setup + bundledBody(options.runtime);
}

const installedComment = `# This folder does not carry specdraft (\`specdraft pack --bundle\` makes one that does): it needs node ≥ 20 and
# specdraft on this machine, found through $SPECDRAFT (a command), \`specdraft\` on PATH, a specdraft checkout holding
# this folder, then \`npx --no-install specdraft\`.
`;

const installedBody = `tried=()

# Runs specdraft from checkout $1 if it holds one and node is on PATH; returns otherwise.
run_checkout() {
  local root="$1"
  [ -f "$root/package.json" ] && grep -q '"name": *"specdraft"' "$root/package.json" || return 0
  if ! command -v node >/dev/null 2>&1; then
    tried+=("the specdraft checkout $root (node is not on PATH)")
    return 0
  fi
  if [ -f "$root/dist/cli/main.js" ]; then
    echo "serve.sh: node $root/dist/cli/main.js" >&2
    exec node "$root/dist/cli/main.js" "\${args[@]}"
  elif [ -f "$root/src/cli/main.ts" ] && [ -d "$root/node_modules/tsx" ]; then
    echo "serve.sh: node --import tsx $root/src/cli/main.ts" >&2
    cd "$root"
    exec node --import tsx src/cli/main.ts "\${args[@]}"
  fi
  tried+=("the specdraft checkout $root (neither built nor installed: npm ci)")
}

if [ -n "\${SPECDRAFT:-}" ]; then
  read -r -a specdraft <<< "$SPECDRAFT"
  echo "serve.sh: $SPECDRAFT" >&2
  exec "\${specdraft[@]}" "\${args[@]}"
fi
tried+=("\\$SPECDRAFT (not set)")
if command -v specdraft >/dev/null 2>&1; then
  echo "serve.sh: $(command -v specdraft)" >&2
  exec specdraft "\${args[@]}"
fi
tried+=("specdraft on PATH (not found)")
dir="$here"
while [ "$dir" != "/" ]; do
  dir="\${dir%/*}"
  [ -n "$dir" ] || dir=/
  run_checkout "$dir"
done
tried+=("a specdraft checkout holding this folder (none)")
if command -v npx >/dev/null 2>&1 && npx --no-install specdraft --version >/dev/null 2>&1; then
  echo "serve.sh: npx --no-install specdraft" >&2
  exec npx --no-install specdraft "\${args[@]}"
fi
tried+=("npx --no-install specdraft ($(command -v npx >/dev/null 2>&1 && echo "not installed" || echo "no npx"))")
{
  echo "serve.sh: cannot start the drafter: specdraft is not installed on this machine."
  list="$(printf '%s; ' "\${tried[@]}")"
  echo "  tried: \${list%; }"
  command -v node >/dev/null 2>&1 || echo "  missing: node ≥ 20 (not on PATH)"
  echo "  missing: specdraft (npm install -g specdraft, or SPECDRAFT='node /path/to/specdraft/dist/cli/main.js')"
  echo "  or repack with \\\`specdraft pack --bundle\\\`: the folder then carries node, specdraft and llama.cpp"
} >&2
exit 127
`;

function bundledComment(runtime: RuntimeDescription): string {
    return `# This folder carries its runtime, ${runtime.file} (node ${runtime.node}, specdraft, llama.cpp for
# ${runtime.backends.join(" + ")}, ${runtime.platform}): unpacked once into $SPECDRAFT_RUNTIME_DIR (default
# \${TMPDIR:-/tmp}/specdraft-runtime-$UID), outside this folder. The host needs only bash, tar, xz (or python3), mkdir,
# mktemp, mv and rm${runtime.backends.includes("cuda") ? "; for --gpu cuda also the NVIDIA driver and the CUDA runtime libraries (libcudart, libcublas)" : ""}.
`;
}

function bundledBody(runtime: RuntimeDescription): string {
    return `archive="$here/${runtime.file}"
base="\${SPECDRAFT_RUNTIME_DIR:-\${TMPDIR:-/tmp}/specdraft-runtime-$UID}"
runtime="$base/${runtime.sha256.slice(0, runtimeKeyLength)}"

if [ ! -f "$runtime/.complete" ]; then
  missing=()
  for tool in tar mkdir mktemp mv rm; do command -v "$tool" >/dev/null 2>&1 || missing+=("$tool"); done
  if command -v xz >/dev/null 2>&1; then
    unxz=(xz -dc --)
  elif command -v python3 >/dev/null 2>&1; then
    unxz=(python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), sys.stdout.buffer)')
  else
    missing+=("xz (or python3)")
  fi
  if [ \${#missing[@]} -gt 0 ]; then
    echo "serve.sh: cannot unpack the bundled runtime: missing \${missing[*]} on PATH" >&2
    exit 127
  fi
  if [ ! -f "$archive" ]; then
    echo "serve.sh: $archive is missing: copy the whole folder, or repack it with specdraft pack --bundle" >&2
    exit 127
  fi
  mkdir -p -m 700 "$base"
  if [ ! -O "$base" ]; then
    echo "serve.sh: $base belongs to another user: set SPECDRAFT_RUNTIME_DIR to a folder of yours" >&2
    exit 1
  fi
  echo "serve.sh: unpacking the bundled runtime (${runtime.bytes} bytes, ${runtime.unpacked_bytes} unpacked) into $runtime" >&2
  tmp="$(mktemp -d "$base/.unpack.XXXXXX")"
  trap 'rm -rf "$tmp"' EXIT
  "\${unxz[@]}" "$archive" | tar -x -C "$tmp"
  : > "$tmp/.complete"
  # another serve.sh may have unpacked the same archive meanwhile: keep its copy
  mv -T "$tmp" "$runtime" 2>/dev/null || rm -rf "$tmp"
  trap - EXIT
fi
if ! "$runtime/bin/node" --version >/dev/null 2>&1; then
  echo "serve.sh: cannot run $runtime/bin/node (a noexec mount? a ${runtime.platform} host?): set SPECDRAFT_RUNTIME_DIR to another folder" >&2
  exit 126
fi
echo "serve.sh: bundled runtime $runtime (node ${runtime.node})" >&2
exec "$runtime/bin/node" "$runtime/specdraft/dist/cli/main.js" "\${args[@]}"
`;
}

/** Text safe inside a double-quoted shell word. */
function shellEscapeInner(text: string): string {
    return text.replace(/(["\\$`])/g, "\\$1");
}
