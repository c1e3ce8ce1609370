/** The native addon's load(): every option is required (its defaults live in TypeScript, never in C++). */

import assert from "node:assert/strict";
import { test } from "node:test";
import { loadNativeAddon, type NativeLoadOptions } from "../../src/engine/nativeAddon.js";

/** Every option, with values load() accepts before it touches the file system. */
const complete: NativeLoadOptions = {
    binsDir: "/nonexistent",
    modelPath: "/nonexistent.gguf",
    streams: 1,
    contextSize: 64,
    batchSize: 64,
    ubatchSize: 64,
    gpuLayers: 0,
    flashAttention: "off",
    kvUnified: false,
    backendSampling: false,
    kvType: "",
    padBatch: 0,
    threads: 1,
    unguardedLogits: false,
    arrivalOrder: false,
    stepPrefill: 0,
    lookahead: 0,
    lookaheadStepTokens: 1,
    lookaheadFill: false,
    verbose: false,
};

test("load() without any one option is a TypeError naming it", async () => {
    const addon = loadNativeAddon("cpu");
    for (const key of Object.keys(complete) as (keyof NativeLoadOptions)[]) {
        const { [key]: _left, ...partial } = complete;
        const engine = addon.createEngine();
        await assert.rejects(
            async () => engine.load(partial as NativeLoadOptions),
            (error: Error) => error instanceof TypeError && error.message.startsWith(`option ${key}: expected a`),
            key,
        );
    }
});

test("load() refuses out-of-range numbers instead of clamping them", async () => {
    const addon = loadNativeAddon("cpu");
    for (const [key, value] of [
        ["streams", 0],
        ["ubatchSize", 0],
        ["threads", -1],
        ["padBatch", 1.5],
        ["stepPrefill", -1],
        ["lookahead", -1],
        ["lookaheadStepTokens", 0],
        ["contextSize", 2.5],
    ] as const) {
        const engine = addon.createEngine();
        await assert.rejects(
            async () => engine.load({ ...complete, [key]: value }),
            (error: Error) => error.message.startsWith(`option ${key}: expected`),
            key,
        );
    }
});
