/**
 * `specdraft validate` end to end against fake servers: table side by side, rejected lines skipped with --skip-invalid,
 * report folders (invalid lines without it: test/cli/loadHeldOut.test.ts); what fails a run before or during the
 * walk: a server not there, failed draft requests, another vocabulary than the data's, conversations past its context.
 */
import assert from "node:assert/strict";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { runValidate } from "../../src/cli/validateCommand.js";
import { sha256File } from "../../src/pack/sha256File.js";
import type { WalkSummary } from "../../src/validate/types.js";
import { captureIo } from "../helpers/captureIo.js";
import { conversation, draftWithPlantedError, locate } from "../helpers/continuationOracle.js";
import { type FakeServer, sendJson, startFakeServer } from "../helpers/startFakeServer.js";
import { writeHeldOut } from "../helpers/writeHeldOut.js";

const conversations = [
    conversation("p", 1, 20, "code"),
    conversation("q", 2, 9, "chat"),
    conversation("r", 3, 6, "chat"),
];

/** A drafter that is right for its first `goodTokens` draft positions, then wrong. */
function drafter(goodTokens: number): Promise<FakeServer> {
    return startFakeServer((requestPath, body, response) => {
        if (requestPath === "/info") return sendJson(response, 404, {}); // a drafter that does not describe itself
        const { tokens, n } = body as { tokens: number[]; n: number };
        const hit = locate(conversations, tokens);
        if (!hit) return sendJson(response, 400, {});
        sendJson(response, 200, { draft: draftWithPlantedError(hit.conversation, hit.position, n, goodTokens) });
    });
}

test("two servers walked on the same data: table side by side, per-server summaries and a comparison", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "specdraft-validate-"));
    const strong = await drafter(3);
    const weak = await drafter(0);
    try {
        const data = path.join(dir, "held.jsonl");
        await writeHeldOut(data, conversations, [`{"id": "broken"`]);
        const io = captureIo();
        const report = path.join(dir, "report");
        const { exitCode, summaries } = await runValidate(
            {
                server: [`strong=${strong.url}`, `weak=${weak.url}`],
                data,
                draftLen: 4,
                concurrency: 2,
                report,
                skipInvalid: true,
                progress: false,
            },
            io,
        );
        const { out, err } = io.text();
        assert.equal(exitCode, 0);
        assert.match(err, /held\.jsonl:4: rejected: not JSON/);
        // strong: a = 3, advance 4: p 20 → 5 steps; q 9 → 0,4,8 → 3 steps (cap 1 at 8); r 6 → 0,4 → 2 steps (cap 2 at 4)
        // weak: a = 0 → steps = L
        assert.deepEqual(
            summaries.map((s) => [s.server.name, s.tokens, s.steps]),
            [
                ["strong", 35, 10],
                ["weak", 35, 35],
            ],
        );
        const header = out.split("\n").find((line) => line.includes("strong"));
        assert.ok(header?.includes("weak"), "one header line names both servers");
        const tauRow = out.split("\n").find((line) => line.startsWith("τ "));
        assert.deepEqual(tauRow?.split(/\s+/).slice(1), [(35 / 10).toFixed(4), (1).toFixed(4)]);

        assert.deepEqual((await readdir(report)).sort(), ["comparison.json", "report.html", "strong", "weak"]);
        const strongSummary = JSON.parse(
            await readFile(path.join(report, "strong", "summary.json"), "utf8"),
        ) as WalkSummary;
        assert.equal(strongSummary.metric, "mean_acceptance_length");
        assert.equal(strongSummary.tau, 3.5);
        assert.equal(strongSummary.samples, 3);
        assert.deepEqual(strongSummary.data, { file: data, rejected_lines: 1 });
        assert.equal(strongSummary.per_category.chat?.tau, 15 / 5);
        for (const key of [
            "tau_macro_over_categories",
            "tau_macro_over_prompts",
            "acceptance_histogram",
            "per_position_acceptance",
            "latency_ms",
            "serving_seconds",
            "failures",
            "draft_tokens",
        ])
            assert.ok(key in strongSummary, `summary.json has ${key}`);
        const comparison = JSON.parse(await readFile(path.join(report, "comparison.json"), "utf8")) as {
            servers: { name: string; tau: number }[];
        };
        assert.deepEqual(
            comparison.servers.map((s) => [s.name, s.tau]),
            [
                ["strong", 3.5],
                ["weak", 1],
            ],
        );
        assert.match(
            await readFile(path.join(report, "weak", "report.html"), "utf8"),
            /<svg class="chart" data-plot="acceptance-histogram"/,
        );
    } finally {
        await strong.close();
        await weak.close();
        await rm(dir, { recursive: true, force: true });
    }
});

test("bad --server, unreadable --data and data without a valid line exit 2 with the problem named", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "specdraft-validate-"));
    try {
        const data = path.join(dir, "held.jsonl");
        await writeHeldOut(data, [], ["not json"]);
        let io = captureIo();
        assert.equal((await runValidate({ server: ["ftp://x"], data, progress: false }, io)).exitCode, 2);
        assert.match(io.text().err, /--server "ftp:\/\/x"/);
        io = captureIo();
        assert.equal(
            (
                await runValidate(
                    { server: ["http://127.0.0.1:9"], data: path.join(dir, "missing.jsonl"), progress: false },
                    io,
                )
            ).exitCode,
            2,
        );
        assert.match(io.text().err, /cannot read --data .*missing\.jsonl/);
        io = captureIo();
        assert.equal((await runValidate({ server: ["http://127.0.0.1:9"], data, progress: false }, io)).exitCode, 2);
        assert.match(io.text().err, /held\.jsonl:1: rejected/);
        assert.match(io.text().err, /no valid conversations/);
    } finally {
        await rm(dir, { recursive: true, force: true });
    }
});

const fingerprint = "a".repeat(64);

/** A drafter server that answers `GET /info` (vocabulary `vocab`, context `contextSize`) and drafts like `drafter(0)`,
 * failing the draft requests `failDraft` picks with HTTP 500. */
function describedDrafter(
    vocab: string,
    contextSize: number,
    failDraft: (request: number) => boolean = () => false,
): Promise<FakeServer> {
    let drafts = 0;
    return startFakeServer((requestPath, body, response) => {
        if (requestPath === "/info")
            return sendJson(response, 200, {
                model: "m",
                vocab_size: 5000,
                vocab_fingerprint: vocab,
                context_size: contextSize,
            });
        if (failDraft(drafts++)) return sendJson(response, 500, { error: { code: "internal", message: "boom" } });
        const { tokens, n } = body as { tokens: number[]; n: number };
        const hit = locate(conversations, tokens);
        sendJson(response, 200, { draft: hit ? draftWithPlantedError(hit.conversation, hit.position, n, 0) : [] });
    });
}

/** held.jsonl inside a reference stage's folder: its manifest lists the file's sha256 and the target's fingerprint. */
async function referenceData(dir: string, vocab: string): Promise<string> {
    const data = path.join(dir, "heldout.jsonl");
    await writeHeldOut(data, conversations);
    const manifest = {
        stage: "reference",
        outputs: { "heldout.jsonl": { sha256: await sha256File(data) } },
        vocab_fingerprint: vocab,
    };
    await writeFile(path.join(dir, "manifest.json"), JSON.stringify(manifest));
    return data;
}

test("a server that cannot be reached, or whose draft requests fail, fails the run (exit 1), not a warning", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "specdraft-validate-"));
    const flaky = await describedDrafter(fingerprint, 4096, (request) => request % 3 === 0);
    try {
        const data = await referenceData(dir, fingerprint);
        const gone = await startFakeServer(() => undefined);
        await gone.close(); // a port nothing listens on any more
        let io = captureIo();
        let result = await runValidate({ server: [`down=${gone.url}`], data, progress: false }, io);
        assert.equal(result.exitCode, 1);
        assert.match(
            io.text().err,
            new RegExp(
                `specdraft validate: down \\(${gone.url}\\): GET ${gone.url}/info: ECONNREFUSED: is it running\\?`,
            ),
        );
        assert.deepEqual(result.summaries, [], "nothing is walked against a server that is not there");

        io = captureIo();
        result = await runValidate({ server: [`flaky=${flaky.url}`], data, draftLen: 4, progress: false }, io);
        assert.equal(result.exitCode, 1);
        const failed = result.summaries[0]?.failures.total;
        assert.ok(failed !== undefined && failed > 0);
        assert.match(io.text().err, new RegExp(`specdraft validate: flaky: ${failed} draft requests failed`));
    } finally {
        await flaky.close();
        await rm(dir, { recursive: true, force: true });
    }
});

test("a server whose vocabulary is not the data's is refused before walking (exit 3)", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "specdraft-validate-"));
    const other = await describedDrafter("b".repeat(64), 4096);
    const same = await describedDrafter(fingerprint, 4096);
    try {
        const data = await referenceData(dir, fingerprint);
        let io = captureIo();
        let result = await runValidate({ server: [`other=${other.url}`], data, progress: false }, io);
        assert.equal(result.exitCode, 3);
        assert.match(
            io.text().err,
            /other: vocabulary fingerprint bbbbbbbbbbbbbbbb…, the data's .*manifest\.json.* aaaaaaaaaaaaaaaa…/,
        );
        assert.ok(!other.requests.some((r) => r.path === "/draft"), "no draft was asked for");

        io = captureIo();
        result = await runValidate({ server: [`same=${same.url}`], data, draftLen: 4, progress: false }, io);
        assert.equal(result.exitCode, 0, io.text().err);
        assert.match(io.text().err, /same: vocabulary fingerprint aaaaaaaaaaaa… matches the data's/);
    } finally {
        await Promise.all([other.close(), same.close()]);
        await rm(dir, { recursive: true, force: true });
    }
});

test("conversations longer than the server's context are named before walking (exit 2)", async () => {
    const dir = await mkdtemp(path.join(tmpdir(), "specdraft-validate-"));
    // p: 3 prompt + 20 continuation tokens: its last step asks for 4 after 3 + 19, 26 in all; q and r need less
    const small = await describedDrafter(fingerprint, 25);
    try {
        const data = await referenceData(dir, fingerprint);
        const io = captureIo();
        const result = await runValidate({ server: [`small=${small.url}`], data, draftLen: 4, progress: false }, io);
        assert.equal(result.exitCode, 2);
        assert.match(
            io.text().err,
            /small: 1 of 3 conversations need more than its context of 25 tokens .*heldout\.jsonl:1 \("p"\): 3 prompt \+ 20 continuation tokens, .*holding 26/,
        );
        assert.ok(!small.requests.some((r) => r.path === "/draft"), "no draft was asked for");
    } finally {
        await small.close();
        await rm(dir, { recursive: true, force: true });
    }
});
