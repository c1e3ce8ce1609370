/**
 * The step-cost model: τ(k) for a per-token agreement, costs between measured sizes, the projection (checked against
 * the H200 figures of 2026-12-01 in bench/results/2026-12-01-h200-real-shape/README.md, "The run before") and the
 * prediction for a measured run's own counts.
 */
import assert from "node:assert/strict";
import { test } from "node:test";
import {
    breakEvenTokensPerStep,
    type CandidateCosts,
    composeDraftWithCandidates,
    withCandidates,
} from "../../bench/speedUpModel.js";
import {
    expectedTokensPerStep,
    interpolateCost,
    predictRunSpeedUp,
    projectSpeedUp,
    type StepCosts,
} from "../../src/speedup/speedUpModel.js";

const close = (actual: number, expected: number, tolerance: number, what: string) =>
    assert.ok(Math.abs(actual - expected) <= tolerance, `${what}: ${actual}, expected ${expected} ± ${tolerance}`);

/** Qwen3-8B-shaped F16 target and 1.7B-shaped Q4_0 drafter over HTTP on the H200 (bench/generateCosts.ts). */
const h200: StepCosts = {
    alone: 5.74,
    verify: new Map([
        [1, 6.9],
        [5, 12.3],
        [9, 14.9],
        [17, 24.3],
    ]),
    draft: new Map([
        [1, 5.35],
        [4, 11.8],
        [8, 18.4],
        [16, 32.2],
    ]),
};

test("τ(k) = 1 + a + … + a^k: the known points and the edges", () => {
    close(expectedTokensPerStep(0.81, 16), 5.117, 0.001, "a = 0.81, k = 16 (τ 5.1)");
    close(expectedTokensPerStep(0.87, 16), 6.98, 0.01, "a = 0.87, k = 16 (τ 7)");
    assert.equal(expectedTokensPerStep(1, 8), 9);
    assert.equal(expectedTokensPerStep(0, 8), 1);
    assert.equal(expectedTokensPerStep(0.5, 0), 1);
    const sum = Array.from({ length: 5 }, (_, i) => 0.75 ** i).reduce((a, b) => a + b);
    close(expectedTokensPerStep(0.75, 4), sum, 1e-12, "the series");
    assert.throws(() => expectedTokensPerStep(1.1, 4), /agreement must be in \[0, 1\], got 1.1/);
    assert.throws(() => expectedTokensPerStep(0.5, 2.5), /draft length must be an integer ≥ 0, got 2.5/);
});

test("costs: exact at measured sizes, linear between them, the nearest line outside", () => {
    assert.equal(interpolateCost(h200.verify, 9), 14.9);
    close(interpolateCost(h200.verify, 3), 9.6, 1e-9, "between 1 and 5");
    close(interpolateCost(h200.verify, 13), 19.6, 1e-9, "between 9 and 17");
    close(interpolateCost(h200.verify, 33), 24.3 + (16 * (24.3 - 14.9)) / 8, 1e-9, "beyond 17");
    close(interpolateCost(h200.draft, 2), 5.35 + (11.8 - 5.35) / 3, 1e-9, "draft of 2");
    // below the smallest size: the line through the two smallest, whatever order the map holds them in
    close(
        interpolateCost(
            new Map([
                [8, 30],
                [2, 10],
                [4, 20],
            ]),
            1,
        ),
        5,
        1e-9,
        "below 2",
    );
    assert.throws(() => interpolateCost(new Map(), 3), /no measured costs/);
    assert.throws(() => interpolateCost(new Map([[1, 2]]), 3), /only size 1 measured/);
});

test("the projection reproduces the H200 figures of 2026-12-01", () => {
    // that run's account: at a = 0.81 the best is 0.82× (k = 4), and 0.70× at k = 16 with verification asking the last only
    const k4 = projectSpeedUp(h200, 0.81, 4);
    close(k4.speedUp, 0.82, 0.005, "k = 4");
    close(k4.stepMs, 12.3 + 11.8, 1e-9, "step = verify(5) + draft(4)");
    close(k4.tau, 3.428, 0.001, "τ(4)");
    const lastOnly: StepCosts = { ...h200, verify: new Map([[17, 9.5]]) };
    close(projectSpeedUp(lastOnly, 0.81, 16).speedUp, 0.7, 0.005, "k = 16, last only");
    // no draft at all (k = 0): the verifier against the target alone
    close(projectSpeedUp(h200, 0.81, 0).speedUp, 5.74 / 6.9, 1e-9, "k = 0");
});

test("a run's prediction uses its own τ and mean verify size, and equals the projection for full drafts", () => {
    // 100 steps of full drafts of 4 that yielded 300 tokens
    const full = predictRunSpeedUp(h200, { tokens: 300, targetSteps: 100, drafted: 400, draftLength: 4 });
    assert.equal(full.tau, 3);
    assert.equal(full.meanVerifyTokens, 5);
    close(full.speculativeMs, 100 * (12.3 + 11.8), 1e-9, "speculative ms");
    assert.equal(full.aloneMs, 300 * 5.74);
    close(full.speedUp, (3 * 5.74) / (12.3 + 11.8), 1e-9, "speed-up");
    // shorter drafts (some steps offered 2): the verify size follows the mean, the request cost stays draft(k)
    const short = predictRunSpeedUp(h200, { tokens: 300, targetSteps: 100, drafted: 300, draftLength: 4 });
    close(short.speculativeMs, 100 * (interpolateCost(h200.verify, 4) + 11.8), 1e-9, "shorter drafts");
    assert.throws(() => predictRunSpeedUp(h200, { tokens: 0, targetSteps: 0, drafted: 0, draftLength: 4 }), /steps/);
});

test("with per-prompt costs each generation's prompt is counted: F(P) in both modes, and D(P) + alone − verify(1)", () => {
    const costs: StepCosts = {
        ...h200,
        promptFixed: new Map([
            [64, 7],
            [512, 21],
        ]),
        draftPrefill: new Map([
            [64, 2],
            [512, 9],
        ]),
    };
    const run = { tokens: 300, targetSteps: 100, drafted: 400, draftLength: 4 };
    const steady = predictRunSpeedUp(costs, run);
    assert.deepEqual(steady.promptMs, { alone: 0, speculative: 0 }, "no prompt lengths: the steady state");
    // two generations: a 64-token prompt and a 288-token one (F and D halfway between their measured points)
    const counted = predictRunSpeedUp(costs, { ...run, promptLengths: [64, 288] });
    const fixed = 7 + 14;
    close(counted.promptMs.alone, fixed, 1e-9, "alone's prompts");
    close(counted.promptMs.speculative, fixed + 2 * (5.74 - 6.9) + 2 + 5.5, 1e-9, "speculative prompts");
    close(counted.aloneMs, 300 * 5.74 + fixed, 1e-9, "alone ms");
    close(counted.speculativeMs, steady.speculativeMs + counted.promptMs.speculative, 1e-9, "speculative ms");
    // a drafter with no prefill figure: the target's part alone
    const noDraftPrefill = predictRunSpeedUp({ ...costs, draftPrefill: undefined }, { ...run, promptLengths: [64] });
    close(noDraftPrefill.promptMs.speculative, 7 + 5.74 - 6.9, 1e-9, "no D(P)");
});

test("candidates: a draft composed from the step costs at m and the steps on real text; the break-even", () => {
    // a launch-bound step: 1.7 ms at 1 token, 1.9 at 5; with 4 candidates a 16-token draft takes 16 / 3.5 steps
    const with4: CandidateCosts = {
        step: new Map([
            [1, 1.7],
            [5, 1.9],
            [9, 2.3],
        ]),
        candidates: 4,
        stepsPerDraft: new Map([
            [8, 8 / 3],
            [16, 16 / 3.5],
        ]),
    };
    close(breakEvenTokensPerStep(with4.step, 4), 1.9 / 1.7, 1e-9, "step(5) / step(1)");
    // 28.3 ms measured for 16 one-token steps and the request around them
    close(composeDraftWithCandidates(28.3, 16, with4), 28.3 - 16 * 1.7 + (16 / 3.5) * 1.9, 1e-9, "n = 16");
    assert.equal(composeDraftWithCandidates(5, 0, with4), 0);
    // no candidates and a step a token: the plain draft itself
    const plain: CandidateCosts = {
        step: with4.step,
        candidates: 0,
        stepsPerDraft: new Map([
            [8, 8],
            [16, 16],
        ]),
    };
    close(composeDraftWithCandidates(15.45, 8, plain), 15.45, 1e-9, "M = 0");
    const costs = withCandidates(h200, with4);
    close(costs.draft.get(16) ?? 0, composeDraftWithCandidates(32.2, 16, with4), 1e-9, "withCandidates, n = 16");
    assert.equal(costs.verify, h200.verify);
    // fewer drafter ms, the same verification: a higher projected speed-up
    assert.ok(projectSpeedUp(costs, 0.81, 8).speedUp > projectSpeedUp(h200, 0.81, 8).speedUp);
});
