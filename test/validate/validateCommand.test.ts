/**
 * `specdraft validate` end to end against two fake servers: table side by side, rejected lines skipped with
 * --skip-invalid, report folders (invalid lines without it: test/cli/loadHeldOut.test.ts).
 */
import assert from "node:assert/strict";
import { mkdtemp, readdir, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { test } from "node:test";
import { runValidate } from "../../src/cli/validateCommand.js";
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
    return startFakeServer((_path, body, response) => {
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
        assert.equal(strongSummary.per_category.chat.tau, 15 / 5);
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
