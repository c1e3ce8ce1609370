/**
 * bench/speedUpTable.ts over a synthetic results folder: the cost tables, a projection per target × drafter (A/B
 * variants listed with the costs only), and the end-to-end check against the model's prediction.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { checkEndToEnd, renderSpeedUpTables, stepCosts, tableDraftLengths } from "../../bench/speedUpTable.js";
import type { GenerateSummary } from "../../src/generate/types.js";
import { projectSpeedUp } from "../../src/speedup/speedUpModel.js";

const sizes = <T>(keys: number[], prefix: string, value: (n: number) => T): Record<string, T> =>
    Object.fromEntries(keys.map((n) => [`${prefix}${n}`, value(n)]));

const target = {
    target: "/tmp/8b.gguf",
    alone_per_token: 5.8,
    alone_native_per_token: 5.6,
    verify: sizes([1, 3, 5, 7, 9, 17], "m", (m) => ({ all: 6 + m, last: 6 + m / 4 })),
    verify_native: sizes([1, 3, 5, 7, 9, 17], "m", (m) => ({ all: 6 + m / 4, last: 6 + m / 5 })),
    verify_native_host: sizes([1, 3, 5, 7, 9, 17], "m", (m) => ({ all: 6 + m / 8, last: 6 + m / 5 })),
};
const drafter = {
    draft: sizes([1, 2, 4, 6, 8, 16], "n", (n) => 3 + 2 * n),
    draft_walk: sizes([1, 2, 4, 6, 8, 16], "n", (n) => 1 + 1.8 * n),
    draft_in_process: sizes([1, 2, 4, 6, 8, 16], "n", (n) => 2 + 2 * n),
    draft_walk_in_process: sizes([1, 2, 4, 6, 8, 16], "n", (n) => 0.5 + 1.8 * n),
    draft_step_ms: { decode: 1.8, submit: 0.2, wait: 1.6, sample: 0.01, host: 0.01, steps: 100, graph_reused: 0.99 },
    steps_in_process: { step1: { steps: 10, decode: 2.9, submit: 0.5, wait: 2.4, graph_reused: 0 } },
};

function summary(speedUp: number): GenerateSummary {
    const totals = (tokens: number, seconds: number, targetSteps: number, drafted: number) => ({
        tokens,
        seconds,
        tokensPerSecond: tokens / seconds,
        targetSteps,
        drafted,
        accepted: tokens - targetSteps,
        draftSeconds: 0,
    });
    return {
        target: { path: "/tmp/8b.gguf", vocabFingerprint: "x", quantization: "F16" },
        draft: { kind: "http", source: "http://127.0.0.1:1" },
        verifier: "exact",
        settings: { maxTokens: 128, draftLength: 4, runs: 1, gpu: "cuda", contextSize: 400 },
        prompts: [],
        alone: totals(512, 512 * 0.0056, 512, 0),
        speculative: totals(512, (512 * 0.0056) / speedUp, 256, 1024),
        speedUp,
        tau: 2,
        draftTimeShare: 0.5,
        identical: true,
        nearTies: 0,
        warnings: [],
        finishedAt: "2026-12-02T00:00:00Z",
    };
}

test("tables from a results folder: costs, projections (not for A/B variants), end to end", async (t) => {
    const dir = await mkdtemp(join(tmpdir(), "speedUpTable-"));
    t.after(() => rm(dir, { recursive: true, force: true }));
    const costs = stepCosts(target, drafter, "http");
    // the run's prediction: 256 steps of verify(5) + draft(4), 512 tokens × alone
    const predicted = (512 * 5.6) / (256 * (6 + 5 / 4 + 1 + 1.8 * 4));
    await writeFile(join(dir, "target-8b-f16.json"), JSON.stringify(target));
    await writeFile(join(dir, "drafter-1.7b.json"), JSON.stringify(drafter));
    await writeFile(join(dir, "drafter-1.7b@before.json"), JSON.stringify(drafter));
    await writeFile(join(dir, "e2e-8b-f16--1.7b--http.json"), JSON.stringify(summary(predicted)));
    await writeFile(join(dir, "e2e-8b-f16--1.7b--in-process.json"), JSON.stringify(summary(predicted * 1.5)));
    await writeFile(join(dir, "notes.txt"), "not a result");

    const md = renderSpeedUpTables(dir);
    // native verify(17) ÷ verify(1) = (6 + 17/4) / (6 + 1/4), with the host's argmax (6 + 17/8) / (6 + 1/8)
    assert.match(md, /\| 8b-f16 \| 5\.80 \/ 5\.60 \| .* \| \*\*1\.64\*\* \(1\.33\) \|/);
    assert.match(md, /\| 1\.7b@before \| HTTP/, "the variant's costs are listed");
    assert.match(md, /\*\*8b-f16 ← 1\.7b\*\*/);
    assert.doesNotMatch(md, /← 1\.7b@before/, "no projection for an A/B variant");
    for (const k of tableDraftLengths) assert.match(md, new RegExp(`\\n\\| ${k} \\| `));
    const k4 = projectSpeedUp(costs, 0.81, 4).speedUp.toFixed(2);
    assert.match(md, new RegExp(`\\| 4 \\| [^\\n]*\\| ${k4.replace(".", "\\.")}× \\(τ 3\\.4\\)`));
    // HTTP run measured exactly as predicted; the in-process one 1.5× faster than its prediction: flagged
    assert.match(md, /\(http\), 4 \| [^\n]* \| \+0\.0 % \| yes \|/);
    assert.match(md, /\(in-process\), 4 \| [^\n]*\(over 10 %\) \| yes \|/);

    const check = checkEndToEnd(summary(predicted), costs);
    assert.ok(Math.abs(check.error) < 1e-9 && check.withinTolerance);
});

test("a drafter timed only in process is projected in process, its HTTP cells empty", async (t) => {
    const dir = await mkdtemp(join(tmpdir(), "speedUpTable-in-process-"));
    t.after(() => rm(dir, { recursive: true, force: true }));
    const { draft: _draft, draft_walk: _walk, draft_step_ms: _step, ...inProcessOnly } = drafter;
    await writeFile(join(dir, "target-8b-f16.json"), JSON.stringify(target));
    await writeFile(join(dir, "drafter-1.7b.json"), JSON.stringify(inProcessOnly));
    const md = renderSpeedUpTables(dir);
    assert.match(md, /\| 1\.7b \| in process \| [^\n]* \| 1\.863 \|/, "its costs, ms a draft token at n = 8");
    assert.doesNotMatch(md, /\| 1\.7b \| HTTP/, "no row for the path not timed");
    const k4 = projectSpeedUp(stepCosts(target, inProcessOnly, "in-process"), 0.81, 4).speedUp.toFixed(2);
    assert.match(md, new RegExp(`\\| 4 \\| [^\\n]*\\| – \\(τ 3\\.4\\) \\| ${k4.replace(".", "\\.")}× \\|`));
});

test("per-prompt costs: F(P) from the target, D(P) = the first draft less a steady one, each generation's prompt", () => {
    const withPrompts = {
        ...target,
        alone_native_fixed: { p64: 7, p256: 9, p512: 13 },
    };
    const drafterWithFirst = { ...drafter, draft_first: { p64: 4.8, p256: 6, p512: 9 } };
    const costs = stepCosts(withPrompts, drafterWithFirst, "http");
    assert.equal(costs.promptFixed?.get(256), 9);
    // draft_walk n1 is 1 + 1.8 = 2.8 ms
    assert.ok(Math.abs((costs.draftPrefill?.get(64) ?? Number.NaN) - 2) < 1e-9);
    assert.equal(stepCosts(withPrompts, drafterWithFirst, "in-process").draftPrefill, undefined, "none in process");
    // drafts timed between a target's verifications win over the walk alone
    const interleaved = { ...drafter, draft_walk_interleaved: { n1: 3, n4: 9 } };
    assert.equal(stepCosts(target, interleaved, "http").draft.get(4), 9);
    assert.equal(stepCosts(target, interleaved, "in-process").draft.get(4), 0.5 + 1.8 * 4);
    const run = summary(0.5);
    run.prompts = [
        { id: "a", promptLength: 64, alone: [], speculative: [run.speculative, run.speculative], identical: true },
        { id: "b", promptLength: 512, alone: [], speculative: [run.speculative], identical: true },
    ] as unknown as GenerateSummary["prompts"];
    const check = checkEndToEnd(run, costs);
    assert.ok(Math.abs(check.predicted.promptMs.alone - (7 + 7 + 13)) < 1e-9, "three generations' prompts");
});

test("with a lookahead-steps.json: step costs at m, the break-even, real text's tokens per step, composed drafts", async (t) => {
    const dir = await mkdtemp(join(tmpdir(), "speedUpTable-candidates-"));
    t.after(() => rm(dir, { recursive: true, force: true }));
    // a launch-bound step: 1.7 ms + 0.05 per extra token; on real text 2 tokens a step with M = 1, 3 with M = 4
    const byM = sizes([1, 2, 5], "m", (m) => ({ candidates: m - 1, step: 1.7 + 0.05 * (m - 1) }));
    await writeFile(join(dir, "target-8b-f16.json"), JSON.stringify(target));
    await writeFile(join(dir, "drafter-1.7b.json"), JSON.stringify({ ...drafter, draft_step_by_m: byM }));
    const cell = (tokensPerStep: number) =>
        sizes([16, 8], "n", (n) => ({
            tokens_per_step: tokensPerStep,
            steps_per_draft: n / tokensPerStep,
            ms_per_draft: 0,
        }));
    const steps = {
        model: "models/specdraft-default.gguf",
        date: "2026-12-01T21:00:00Z",
        files: {
            "data/lab-unseen-heldout.jsonl": {
                conversations: 128,
                repeated_4gram_share: 0.5,
                all: { M0: cell(1), M1: cell(2), M4: cell(3) },
                categories: {},
            },
        },
    };
    await writeFile(join(dir, "lookahead-steps.json"), JSON.stringify(steps));
    const md = renderSpeedUpTables(dir);
    assert.match(md, /#### Drafting with candidates/);
    // m = 5: break-even 1.9 / 1.7 = 1.12; 16 in process: 0.5 + 1.8 · 16 − 16 · 1.7 + 16 / 3 · 1.9
    const composed = 0.5 + 1.8 * 16 - 16 * 1.7 + (16 / 3) * 1.9;
    assert.match(
        md,
        new RegExp(`\\| 5 \\| 1\\.900 \\| 1\\.12 \\| 3\\.00 \\| ${composed.toFixed(2).replace(".", "\\.")} / `),
    );
    assert.match(md, /\*\*8b-f16 ← 1\.7b\*\* with candidates/);
    // every k picks M = 4 (the cheapest composed draft) over M = 0 and 1
    assert.match(md, /\| 16 \(τ [^|]*\| [\d.]+× \(M 4; [\d.]+×\)/);
});
