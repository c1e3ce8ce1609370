/** The test runner's environment isolation (isolateEnv.ts): a shell's SPECDRAFT_* settings never reach a test. */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const isolateEnv = fileURLToPath(new URL("./isolateEnv.ts", import.meta.url));

test("a test file run as npm test runs it sees no SPECDRAFT_* variable but the test switches", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "specdraft-env-"));
    try {
        const probe = path.join(dir, "probe.test.mjs");
        await writeFile(
            probe,
            'import { test } from "node:test";\n' +
                "test('env', () => { console.log('SEEN ' + JSON.stringify(Object.keys(process.env)" +
                ".filter((n) => n.startsWith('SPECDRAFT')).sort())); });\n",
        );
        // the flags of scripts/test.sh and npm run test:ts; without this runner's NODE_TEST_CONTEXT, so the inner runner
        // reports in its plain format
        const { NODE_TEST_CONTEXT: _runner, ...env } = process.env;
        const result = spawnSync(process.execPath, ["--import", "tsx", "--import", isolateEnv, "--test", probe], {
            env: {
                ...env,
                SPECDRAFT_RUNTIME_DIR: "/somewhere/runtimes",
                SPECDRAFT: "/somewhere/specdraft",
                SPECDRAFT_TEST_GPU: "cpu",
                SPECDRAFT_GGML_CPU_VARIANT: "haswell",
            },
            encoding: "utf8",
        });
        assert.equal(result.status, 0, result.stdout + result.stderr);
        const seen = /SEEN (\[.*\])/.exec(result.stdout);
        assert.ok(seen, result.stdout);
        assert.deepEqual(JSON.parse(seen[1] as string), ["SPECDRAFT_GGML_CPU_VARIANT", "SPECDRAFT_TEST_GPU"]);
    } finally {
        await rm(dir, { recursive: true, force: true });
    }
});
