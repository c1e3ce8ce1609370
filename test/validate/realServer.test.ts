/**
 * Against the real `specdraft serve` (tiny random-weights Qwen3 fixture on the CPU), started through a packed folder's
 * serve.sh: held-out data whose continuations are the drafter's own greedy output must be accepted in full at every
 * step (τ = L ÷ ⌈L ÷ (k + 1)⌉), and selfcheck passes on the folder.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { after, before, test } from "node:test";
import { fileURLToPath } from "node:url";
import { runPack } from "../../src/cli/packCommand.js";
import { runSelfcheckCommand } from "../../src/cli/selfcheckCommand.js";
import { runValidate } from "../../src/cli/validateCommand.js";
import { createSpecdraftClient } from "../../src/client/createDraftClient.js";
import {
    findFreePort,
    type ServeProcess,
    startServeScript,
    waitForHealth,
} from "../../src/selfcheck/startServeScript.js";
import type { Conversation } from "../../src/validate/types.js";
import { captureIo } from "../helpers/captureIo.js";
import { writeHeldOut } from "../helpers/writeHeldOut.js";

const repoRoot = fileURLToPath(new URL("../../", import.meta.url));
/** This checkout's CLI from source, so the test runs the code under test rather than a possibly stale dist/. */
const specdraftFromSource = `${process.execPath} --import ${import.meta.resolve("tsx")} ${path.join(repoRoot, "src/cli/main.ts")}`;
const continuationLength = 40;
const draftLength = 16;

let dir = "";
let folder = "";
let server: ServeProcess | undefined;
let baseUrl = "";

before(async () => {
    dir = await mkdtemp(path.join(tmpdir(), "specdraft-real-"));
    folder = path.join(dir, "drafter");
    const io = captureIo();
    assert.equal(
        await runPack(
            { model: path.join(repoRoot, "test/fixtures/tiny-qwen3.gguf"), out: folder, base: "Qwen/Qwen3-8B@test" },
            io,
        ),
        0,
        io.text().err,
    );
    const port = await findFreePort();
    baseUrl = `http://127.0.0.1:${port}`;
    server = startServeScript(path.join(folder, "serve.sh"), folder, port, { SPECDRAFT: specdraftFromSource });
    const health = await waitForHealth(baseUrl, 120, server);
    assert.ok(health.healthy, `${health.healthy ? "" : health.reason}\n${server.outputTail()}`);
});

after(async () => {
    await server?.stop();
    await rm(dir, { recursive: true, force: true });
});

test("continuations that are the drafter's own greedy output are accepted in full at every step", async () => {
    const client = createSpecdraftClient(baseUrl, { name: "tiny", timeoutMs: 60_000 });
    const prompts = [
        [1, 2, 3, 4, 5],
        [100, 200, 300],
        [3999, 17, 42, 7, 7, 7, 9],
        [250, 251],
    ];
    const conversations: Conversation[] = [];
    for (const [i, prompt] of prompts.entries()) {
        const greedy = await client.draft(prompt, continuationLength);
        assert.ok(greedy.ok && greedy.draft.length === continuationLength, JSON.stringify(greedy));
        conversations.push({
            id: `g${i}`,
            category: i % 2 === 0 ? "even" : "odd",
            promptTokens: prompt,
            continuationTokens: greedy.draft,
            lineNumber: 0,
        });
    }
    const data = path.join(dir, "greedy.jsonl");
    await writeHeldOut(data, conversations);

    const io = captureIo();
    const { exitCode, summaries } = await runValidate(
        {
            server: [`tiny=${baseUrl}`],
            data,
            draftLen: draftLength,
            concurrency: 4,
            progress: false,
            report: path.join(dir, "report"),
        },
        io,
    );
    assert.equal(exitCode, 0, io.text().err);
    const [summary] = summaries;
    assert.ok(summary, "validate returned no summary");
    // every draft is right: advance k + 1 = 17 per step, 0 → 17 → 34 → 40: 3 steps per conversation
    const stepsEach = Math.ceil(continuationLength / (draftLength + 1));
    assert.equal(summary.failures.total, 0);
    assert.equal(summary.steps, prompts.length * stepsEach);
    assert.equal(summary.tau, continuationLength / stepsEach);
    assert.deepEqual(
        summary.per_position_acceptance.map((p) => p.rate),
        summary.per_position_acceptance.map(() => 1),
    );
});

test("selfcheck passes on the packed folder with the real server behind serve.sh", async () => {
    const io = captureIo();
    const conversation: Conversation = {
        id: "x",
        promptTokens: [5, 6, 7],
        continuationTokens: Array.from({ length: 100 }, (_, i) => (i * 37) % 4000),
        lineNumber: 0,
    };
    const data = path.join(dir, "selfcheck.jsonl");
    await writeHeldOut(data, [conversation]);
    const exitCode = await runSelfcheckCommand(
        { dir: folder, data, startupTimeoutSeconds: 120, progress: false, env: { SPECDRAFT: specdraftFromSource } },
        io,
    );
    const { out, err } = io.text();
    assert.equal(exitCode, 0, out + err);
    assert.match(out, /✓ startup/);
    assert.match(out, /✓ smoke\s+POST \/draft → 16 token ids/);
    assert.match(out, /all 7 gates passed/);
});
