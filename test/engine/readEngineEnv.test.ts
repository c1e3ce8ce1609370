/** SPECDRAFT_* engine variables: parsed strictly, and weaker than the options loadEngine is given. */

import assert from "node:assert/strict";
import { test } from "node:test";
import { loadEngine } from "../../src/engine/loadEngine.js";
import { readEngineEnv } from "../../src/engine/readEngineEnv.js";
import { testGpu, testThreads, tinyModel } from "./helpers/engineFixtures.js";

test("no variables, or empty ones: no settings", () => {
    assert.deepEqual(readEngineEnv({}), {});
    assert.deepEqual(readEngineEnv({ SPECDRAFT_KV_TYPE: "", SPECDRAFT_THREADS: "", SPECDRAFT_PAD_BATCH: "" }), {});
});

test("every variable becomes its setting", () => {
    assert.deepEqual(
        readEngineEnv({
            SPECDRAFT_KV_TYPE: "q8_0",
            SPECDRAFT_BACKEND_SAMPLING: "1",
            SPECDRAFT_FLASH_ATTENTION: "0",
            SPECDRAFT_UBATCH: "256",
            SPECDRAFT_BATCH: "2048",
            SPECDRAFT_THREADS: "3",
            SPECDRAFT_MAX_STEPS_PER_RUN: "0",
            SPECDRAFT_PAD_BATCH: "0.5",
            SPECDRAFT_STEP_PREFILL: "2",
            SPECDRAFT_LOOKAHEAD: "0",
            SPECDRAFT_LOOKAHEAD_STEP_TOKENS: "24",
            SPECDRAFT_LOOKAHEAD_FILL: "1",
            SPECDRAFT_UNGUARDED_LOGITS: "1",
            UNRELATED: "x",
        }),
        {
            kvType: "q8_0",
            backendSampling: true,
            flashAttention: false,
            unguardedLogits: true,
            ubatchSize: 256,
            batchSize: 2048,
            threads: 3,
            maxStepsPerRun: 0,
            padBatch: 0.5,
            stepPrefill: 2,
            lookahead: 0,
            lookaheadStepTokens: 24,
            lookaheadFill: true,
        },
    );
});

test("a value it cannot use is a RangeError naming the variable and the value", () => {
    for (const [name, value, expected] of [
        ["SPECDRAFT_KV_TYPE", "q4_0", "one of f16, q8_0, bf16, f32"],
        ["SPECDRAFT_BACKEND_SAMPLING", "yes", "0 or 1"],
        ["SPECDRAFT_FLASH_ATTENTION", "2", "0 or 1"],
        ["SPECDRAFT_UNGUARDED_LOGITS", "true", "0 or 1"],
        ["SPECDRAFT_UBATCH", "0", "an integer ≥ 1"],
        ["SPECDRAFT_BATCH", "1.5", "an integer ≥ 1"],
        ["SPECDRAFT_THREADS", "-2", "an integer ≥ 1"],
        ["SPECDRAFT_MAX_STEPS_PER_RUN", "many", "an integer ≥ 0"],
        ["SPECDRAFT_PAD_BATCH", "1.5", "a fraction 0–1"],
        ["SPECDRAFT_LOOKAHEAD", "-1", "an integer ≥ 0"],
        ["SPECDRAFT_LOOKAHEAD_STEP_TOKENS", "0", "an integer ≥ 1"],
        ["SPECDRAFT_LOOKAHEAD_FILL", "yes", "0 or 1"],
        ["SPECDRAFT_PAD_BATCH", "-0.5", "a fraction 0–1"],
    ] as const) {
        assert.throws(
            () => readEngineEnv({ [name]: value }),
            (error: Error) =>
                error instanceof RangeError &&
                error.message === `${name} must be ${expected}, got ${JSON.stringify(value)}.`,
            `${name}=${value}`,
        );
    }
});

test("loadEngine: a variable fills an option not given, a given option wins, useEnv: false ignores it", async (t) => {
    const saved = process.env.SPECDRAFT_FLASH_ATTENTION;
    t.after(() => {
        if (saved === undefined) delete process.env.SPECDRAFT_FLASH_ATTENTION;
        else process.env.SPECDRAFT_FLASH_ATTENTION = saved;
    });
    process.env.SPECDRAFT_FLASH_ATTENTION = testGpu === "cpu" ? "1" : "0";
    const fromEnv = testGpu === "cpu";
    const common = { modelPath: tinyModel, streams: 1, contextSize: 64, gpu: testGpu, threads: testThreads };
    for (const [options, expected] of [
        [{}, fromEnv],
        [{ flashAttention: !fromEnv }, !fromEnv],
        [{ useEnv: false }, !fromEnv],
    ] as const) {
        const engine = await loadEngine({ ...common, ...options });
        try {
            assert.equal(engine.info.flashAttention, expected, JSON.stringify(options));
        } finally {
            await engine.close();
        }
    }
});
