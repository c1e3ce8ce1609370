/**
 * `specdraft selfcheck` on packed folders whose serve.sh runs a fake specdraft (SPECDRAFT=node fakeSpecdraft.mjs):
 * passes on a good folder; on a broken one fails with the right gate named; always stops the server it started.
 */
import assert from "node:assert/strict";
import { chmod, copyFile, mkdir, mkdtemp, readdir, readFile, rm, stat, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { runPack } from "../../src/cli/packCommand.js";
import { runSelfcheckCommand } from "../../src/cli/selfcheckCommand.js";
import type { SelfcheckOptions } from "../../src/selfcheck/types.js";
import { captureIo } from "../helpers/captureIo.js";
import { writeHeldOut } from "../helpers/writeHeldOut.js";

const fakeSpecdraft = `node ${path.resolve("test/selfcheck/helpers/fakeSpecdraft.mjs")}`;
let dir = "";
let data = "";

/** Conversations whose continuation counts up from the prompt's last token: the fake drafts them perfectly. */
function countingConversation(id: string, start: number, length: number) {
    return {
        id,
        promptTokens: [start, start + 1, start + 2],
        continuationTokens: Array.from({ length }, (_, i) => start + 3 + i),
        lineNumber: 0,
    };
}

before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), "specdraft-selfcheck-"));
    data = path.join(dir, "held.jsonl");
    await writeHeldOut(data, [
        countingConversation("a", 100, 200),
        countingConversation("b", 1000, 90),
        countingConversation("c", 5000, 40),
    ]);
});

after(async () => {
    await rm(dir, { recursive: true, force: true });
});

async function packed(name: string): Promise<string> {
    const out = path.join(dir, name);
    const io = captureIo();
    assert.equal(
        await runPack({ model: "test/fixtures/tiny-qwen3.gguf", out, base: "Qwen/Qwen3-8B@abc1234" }, io),
        0,
        io.text().err,
    );
    return out;
}

/** Runs selfcheck on `folder` against the fake in `mode`; returns the exit code, the gate lines and the fake's record. */
async function selfcheck(folder: string, mode: string, options: Partial<SelfcheckOptions> = {}) {
    const record = path.join(folder, `.record-${mode}.json`);
    const io = captureIo();
    const exitCode = await runSelfcheckCommand(
        {
            dir: folder,
            data,
            startupTimeoutSeconds: 20,
            progress: false,
            ...options,
            env: { SPECDRAFT: fakeSpecdraft, FAKE_SPECDRAFT_MODE: mode, FAKE_SPECDRAFT_RECORD: record },
        },
        io,
    );
    const { out, err } = io.text();
    const gate = (name: string): string =>
        out.split("\n").find((line) => line.slice(2).startsWith(name)) ?? `(no ${name} line in:\n${out}\n${err})`;
    let fake: { argv: string[]; pid: number } | undefined;
    try {
        fake = JSON.parse(await readFile(record, "utf8")) as { argv: string[]; pid: number };
    } catch {
        fake = undefined;
    }
    return { exitCode, out, err, gate, fake };
}

function isAlive(pid: number): boolean {
    try {
        process.kill(pid, 0);
        return true;
    } catch {
        return false;
    }
}

test("a packed folder passes every gate; serve.sh got the model, PORT and k; the server is stopped after", async () => {
    const folder = await packed("good");
    const run = await selfcheck(folder, "slow-start");
    assert.equal(run.exitCode, 0, run.out + run.err);
    for (const name of ["prerequisites", "size", "startup", "smoke", "serving time", "failures", "healthy after walk"])
        assert.match(run.gate(name), /^✓ /, name);
    assert.match(run.out, /all 7 gates passed/);
    // slow-start answers 503 for 1.5 s first
    const startup = /after ([\d.]+) s/.exec(run.gate("startup"));
    assert.ok(startup && Number(startup[1]) >= 1.4, run.gate("startup"));
    const port = /PORT=(\d+)/.exec(run.gate("startup"))?.[1];
    assert.ok(run.fake);
    const argv = run.fake.argv;
    assert.equal(argv[argv.indexOf("--port") + 1], port);
    assert.equal(argv[argv.indexOf("--model") + 1], path.join(path.resolve(folder), "tiny-qwen3.gguf"));
    assert.equal(argv[argv.indexOf("--draft-len") + 1], "16");
    assert.match(run.gate("smoke"), /16 token ids/);
    // default sample: first 16 conversations, windows of 64, ≤ 4 each, as many as fit: a (L 200) 3, b (90) 1,
    // c (40) 1 window of all 40 → 296 of 330 tokens. Drafts are perfect (advance 17): a 64-token window takes
    // 0 → 17 → 34 → 51 → 64 = 4 steps, the 40-token one 0 → 17 → 34 → 40 = 3 → 19 steps, τ = 296 / 19
    assert.match(run.gate("serving time"), /projected [\d.]+ s for 330 tokens \(5 windows, 296 tokens walked/);
    assert.match(run.gate("serving time"), new RegExp(`τ ${(296 / 19).toFixed(3)}`));
    assert.match(run.gate("failures"), /0 of 19 requests failed/);
    assert.equal(isAlive(run.fake.pid), false, "the fake server was stopped");
});

test("--full walks every conversation", async () => {
    const folder = await packed("full");
    const run = await selfcheck(folder, "ok", { full: true });
    assert.equal(run.exitCode, 0, run.out + run.err);
    // a: 200 tokens, advance 17 per step → 12 steps (11 × 17 = 187, then 13); b: 90 → 6 (5 × 17 = 85, then 5); c: 40 → 3
    assert.match(run.gate("serving time"), /^✓ serving time\s+[\d.]+ s for 330 tokens/);
    assert.match(run.gate("serving time"), new RegExp(`τ ${(330 / 21).toFixed(3)}`));
    assert.match(run.gate("failures"), /0 of 21 requests/);
});

test("no serve.sh: prerequisites fail naming it, the server gates are not run", async () => {
    const folder = await packed("no-serve");
    await rm(path.join(folder, "serve.sh"));
    const run = await selfcheck(folder, "ok");
    assert.equal(run.exitCode, 1);
    assert.match(run.gate("prerequisites"), /^✗ prerequisites\s+serve\.sh: missing/);
    assert.match(run.gate("size"), /^✓ /);
    assert.match(run.gate("startup"), /^✗ startup\s+not run: no runnable serve\.sh/);
    assert.match(
        run.out,
        /6 of 7 gates failed: prerequisites, startup, smoke, serving time, failures, healthy after walk/,
    );
    assert.equal(run.fake, undefined);
});

test("a server that never becomes healthy fails startup within the limit and is killed", async () => {
    const folder = await packed("never-healthy");
    const run = await selfcheck(folder, "never-healthy", { startupTimeoutSeconds: 2 });
    assert.equal(run.exitCode, 1);
    assert.match(run.gate("startup"), /^✗ startup\s+\/health did not answer 200 within 2 s \(last: HTTP 503\)/);
    assert.match(run.gate("smoke"), /not run/);
    assert.ok(run.fake);
    assert.equal(isAlive(run.fake.pid), false, "the never-healthy server was stopped");
});

test("a server that exits at once fails startup with its exit code and last output", async () => {
    const folder = await packed("exits");
    const run = await selfcheck(folder, "exit");
    assert.equal(run.exitCode, 1);
    assert.match(run.gate("startup"), /serve\.sh exited \(3\) before \/health answered 200/);
    assert.match(run.out, /cannot load the model \(on purpose\)/);
});

test("an oversize folder fails the size gate (small configurable limit); the other gates still pass", async () => {
    const folder = await packed("oversize");
    const run = await selfcheck(folder, "ok", { maxBytes: 100_000 });
    assert.equal(run.exitCode, 1);
    const bytes = /^✗ size\s+([\d,]+) B > 100,000 B/.exec(run.gate("size"))?.[1];
    assert.ok(bytes, run.gate("size"));
    assert.ok(
        Number(bytes.replace(/,/g, "")) > (await stat("test/fixtures/tiny-qwen3.gguf")).size,
        "the model and the files beside it count",
    );
    assert.match(run.gate("size"), /largest parts: tiny-qwen3\.gguf 745,472 B, serve\.sh [\d,]+ B, architecture\.json/);
    assert.match(run.out, /1 of 7 gates failed: size/);
});

test("failed requests, a short smoke draft, a blown budget and a malformed manifest each fail their own gate", async () => {
    const folder = await packed("misbehaving");
    const flaky = await selfcheck(folder, "flaky");
    assert.match(flaky.gate("failures"), /^✗ failures\s+(\d+) of \d+ requests failed.*http \1/);
    assert.match(flaky.gate("smoke"), /^✓ /);

    const short = await selfcheck(folder, "short-draft");
    assert.match(short.gate("smoke"), /^✗ smoke\s+POST \/draft n=16 → 15 token ids, expected 16/);

    const slow = await selfcheck(folder, "ok", { budgetSeconds: 0.000_001 });
    assert.match(slow.gate("serving time"), /^✗ serving time.*> budget 0\.000001 s/);

    await writeFile(
        path.join(folder, "data_manifest.json"),
        JSON.stringify({ sources: [{ name: "web", split: "pretrain" }] }),
    );
    await chmod(path.join(folder, "serve.sh"), 0o755);
    const badManifest = await selfcheck(folder, "ok");
    assert.match(
        badManifest.gate("prerequisites"),
        /^✗ prerequisites\s+data_manifest\.json: "sources"\[0\] \(web\): expected a pinned/,
    );
    assert.equal(badManifest.exitCode, 1);
});

test("serve.sh without SPECDRAFT finds a specdraft checkout holding the folder (dist/cli/main.js)", async () => {
    // a stand-in checkout whose built CLI is the fake
    const checkout = path.join(dir, "checkout");
    await mkdir(path.join(checkout, "dist", "cli"), { recursive: true });
    await writeFile(
        path.join(checkout, "package.json"),
        JSON.stringify({ name: "specdraft", type: "module" }, null, 2),
    );
    await copyFile("test/selfcheck/helpers/fakeSpecdraft.mjs", path.join(checkout, "dist", "cli", "main.js"));
    const out = path.join(checkout, "models", "drafter");
    const io = captureIo();
    assert.equal(await runPack({ model: "test/fixtures/tiny-qwen3.gguf", out }, io), 0);
    const record = path.join(out, ".record.json");
    const check = captureIo();
    const exitCode = await runSelfcheckCommand(
        {
            dir: out,
            data,
            startupTimeoutSeconds: 20,
            progress: false,
            // only node and the system's tools on PATH, so no installed `specdraft` can be picked instead
            env: {
                SPECDRAFT: "",
                PATH: `${path.dirname(process.execPath)}:/usr/bin:/bin`,
                FAKE_SPECDRAFT_MODE: "ok",
                FAKE_SPECDRAFT_RECORD: record,
            },
        },
        check,
    );
    assert.equal(exitCode, 0, `${check.text().out}${check.text().err}`);
    const fake = JSON.parse(await readFile(record, "utf8")) as { argv: string[] };
    assert.equal(fake.argv[0], "serve");
});

test("a folder without its runtime never names the packing checkout; where specdraft is missing serve.sh says what", async () => {
    const folder = await packed("not-bundled");
    for (const file of await readdir(folder, { recursive: true }))
        if ((await stat(path.join(folder, file))).isFile())
            assert.ok(
                !(await readFile(path.join(folder, file))).includes(process.cwd()),
                `${file} names ${process.cwd()}`,
            );
    // no node and no specdraft here: the clean environment's PATH holds only bash and a few core tools
    const io = captureIo();
    const exitCode = await runSelfcheckCommand(
        { dir: folder, data, startupTimeoutSeconds: 20, progress: false, cleanEnv: true },
        io,
    );
    const { out } = io.text();
    assert.equal(exitCode, 1);
    assert.match(
        out,
        /✓ size .*model [\d,]+ B = [\d.]+ % of the cap; no runtime bundled: serve\.sh needs node and specdraft on the host$/m,
    );
    assert.match(out, /✗ startup\s+serve\.sh exited \(127\) before \/health answered 200/);
    assert.match(out, /cannot start the drafter: specdraft is not installed on this machine/);
    assert.match(out, /missing: node ≥ 20 \(not on PATH\)/);
    assert.match(out, /tried: \$SPECDRAFT \(not set\); specdraft on PATH \(not found\)/);
    assert.match(out, /repack with `specdraft pack --bundle`/);
});
