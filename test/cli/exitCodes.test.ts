/** The exit codes: docs/cli.md documents exactly src/cli/exitCodes.ts, and commander's own usage errors give `usage`. */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFile } from "node:fs/promises";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { exitCodes } from "../../src/cli/exitCodes.js";

const cli = fileURLToPath(new URL("../../src/cli/main.ts", import.meta.url));

test("docs/cli.md's table lists every exit code with its name, and nothing else", async () => {
    const doc = await readFile(new URL("../../docs/cli.md", import.meta.url), "utf8");
    const documented = [...doc.matchAll(/^\| (\d+) \| `(\w+)` \| .+ \|$/gm)].map(([, code, name]) => [
        name,
        Number(code),
    ]);
    assert.deepEqual(Object.fromEntries(documented), exitCodes);
    assert.equal(documented.length, Object.keys(exitCodes).length, "a code is documented twice");
});

test("the CLI process: help and version exit 0, commander's usage errors exit 2", () => {
    for (const [args, expected] of [
        [["--help"], exitCodes.ok],
        [["--version"], exitCodes.ok],
        [["validate", "--help"], exitCodes.ok],
        [["validate", "--data", "x.jsonl"], exitCodes.usage], // required --server missing
        [["validate", "--server", "http://127.0.0.1:9", "--data", "x.jsonl", "--bogus"], exitCodes.usage],
        [["serve", "--port", "http"], exitCodes.usage],
        [["no-such-command"], exitCodes.usage],
    ] as const) {
        const result = spawnSync(process.execPath, ["--import", "tsx", cli, ...args], { encoding: "utf8" });
        assert.equal(result.status, expected, `${args.join(" ")}: ${result.stderr}`);
    }
});
