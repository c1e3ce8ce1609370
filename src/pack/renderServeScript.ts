/**
 * serve.sh of a packed drafter folder: starts `specdraft serve` on this folder's model, on $PORT and $HOST (default:
 * serve's own, 127.0.0.1:8000), from wherever the folder is run. It finds specdraft, in order, through
 *   1. $SPECDRAFT — a command, e.g. `specdraft` or `node /opt/specdraft/dist/cli/main.js`;
 *   2. `specdraft` on PATH;
 *   3. a specdraft checkout: the one that packed the folder, then one holding the folder (searched upwards) —
 *      its dist/cli/main.js once built (`npm ci` builds it), else src/cli/main.ts through its tsx;
 *   4. `npx --no-install specdraft` (a locally installed package; never downloads).
 */
import { defaultHost, defaultPort } from "../server/serveDefaults.js";

/** What serve.sh is written for. */
export interface ServeScriptOptions {
    /** The model's file name inside the folder. */
    modelFile: string;
    /** Tokens drafted when a request gives no n. */
    draftLength: number;
    /** Absolute path of the specdraft checkout that packed the folder, tried after $SPECDRAFT and PATH. */
    packedFrom: string | null;
}

/** The text of serve.sh. */
export function renderServeScript(options: ServeScriptOptions): string {
    return `#!/usr/bin/env bash
# Starts this drafter: \`specdraft serve\` on $PORT (default ${defaultPort}), host $HOST (default ${defaultHost}).
# Extra arguments go to \`specdraft serve\` (e.g. --gpu cuda --streams 64). Written by \`specdraft pack\`.
# specdraft is found through: $SPECDRAFT (a command), \`specdraft\` on PATH, the checkout that packed this folder,
# a checkout holding this folder, then \`npx --no-install specdraft\`.
set -euo pipefail
here="$(cd "$(dirname "\${BASH_SOURCE[0]}")" && pwd)"
args=(serve --model "$here/${shellEscapeInner(options.modelFile)}" --port "\${PORT:-${defaultPort}}" --host "\${HOST:-${defaultHost}}" --draft-len ${options.draftLength} "$@")
packed_from=${options.packedFrom === null ? "''" : shellQuote(options.packedFrom)}

# Runs specdraft from checkout $1 if it holds one; returns otherwise.
run_checkout() {
  local root="$1"
  [ -n "$root" ] && [ -f "$root/package.json" ] && grep -q '"name": *"specdraft"' "$root/package.json" || return 0
  if [ -f "$root/dist/cli/main.js" ]; then
    echo "serve.sh: node $root/dist/cli/main.js" >&2
    exec node "$root/dist/cli/main.js" "\${args[@]}"
  elif [ -f "$root/src/cli/main.ts" ] && [ -d "$root/node_modules/tsx" ]; then
    echo "serve.sh: node --import tsx $root/src/cli/main.ts" >&2
    cd "$root"
    exec node --import tsx src/cli/main.ts "\${args[@]}"
  fi
}

if [ -n "\${SPECDRAFT:-}" ]; then
  read -r -a specdraft <<< "$SPECDRAFT"
  echo "serve.sh: $SPECDRAFT" >&2
  exec "\${specdraft[@]}" "\${args[@]}"
fi
if command -v specdraft >/dev/null 2>&1; then
  echo "serve.sh: $(command -v specdraft)" >&2
  exec specdraft "\${args[@]}"
fi
run_checkout "$packed_from"
dir="$here"
while [ "$dir" != "/" ]; do
  dir="$(dirname "$dir")"
  run_checkout "$dir"
done
if command -v npx >/dev/null 2>&1; then
  echo "serve.sh: npx --no-install specdraft" >&2
  exec npx --no-install specdraft "\${args[@]}"
fi
echo "serve.sh: cannot find specdraft: set SPECDRAFT (e.g. SPECDRAFT='node /path/to/specdraft/dist/cli/main.js'), or install it" >&2
exit 127
`;
}

/** A single-quoted shell word. */
function shellQuote(text: string): string {
    return `'${text.replace(/'/g, `'\\''`)}'`;
}

/** Text safe inside a double-quoted shell word. */
function shellEscapeInner(text: string): string {
    return text.replace(/(["\\$`])/g, "\\$1");
}
