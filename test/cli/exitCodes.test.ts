/** The exit codes: docs/cli.md documents exactly src/cli/exitCodes.ts, and commander's own usage errors give `usage`. */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
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

test("the CLI process: help and version exit 0, commander's usage errors exit 2", async () => {
    const cases = [
        [["--help"], exitCodes.ok],
        [["--version"], exitCodes.ok],
        [["validate", "--help"], exitCodes.ok],
        [["validate", "--data", "x.jsonl"], exitCodes.usage], // required --server missing
        [["validate", "--server", "http://127.0.0.1:9", "--data", "x.jsonl", "--bogus"], exitCodes.usage],
        [["serve", "--port", "http"], exitCodes.usage],
        [["no-such-command"], exitCodes.usage],
    ] as const;
    // side by side: each is a node start-up with the TypeScript loader, most of this test's time one after another
    const results = await Promise.all(cases.map(([args]) => runCli(args)));
    cases.forEach(([args, expected], i) => {
        assert.equal(results[i]?.status, expected, `${args.join(" ")}: ${results[i]?.stderr}`);
    });
});

function runCli(args: readonly string[]): Promise<{ status: number | null; stderr: string }> {
    return new Promise((resolve, reject) => {
        const child = spawn(process.execPath, ["--import", "tsx", cli, ...args], {
            stdio: ["ignore", "ignore", "pipe"],
        });
        let stderr = "";
        child.stderr.setEncoding("utf8").on("data", (chunk: string) => {
            stderr += chunk;
        });
        child.on("error", reject).on("close", (status) => resolve({ status, stderr }));
    });
}
