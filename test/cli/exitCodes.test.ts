/** The exit codes: docs/cli.md documents exactly src/cli/exitCodes.ts. */
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { test } from "node:test";
import { exitCodes } from "../../src/cli/exitCodes.js";

test("docs/cli.md's table lists every exit code with its name, and nothing else", async () => {
    const doc = await readFile(new URL("../../docs/cli.md", import.meta.url), "utf8");
    const documented = [...doc.matchAll(/^\| (\d+) \| `(\w+)` \| .+ \|$/gm)].map(([, code, name]) => [
        name,
        Number(code),
    ]);
    assert.deepEqual(Object.fromEntries(documented), exitCodes);
    assert.equal(documented.length, Object.keys(exitCodes).length, "a code is documented twice");
});
