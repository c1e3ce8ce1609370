/** Shared bits of the engine tests: the tiny GGUF fixtures and seeded random prompts. */

import { fileURLToPath } from "node:url";
import { seededRandom } from "../../../bench/lib/seededRandom.js";

/** 4,003-token Qwen3 vocabulary, Q8_0 weights (test/fixtures/make_tiny_qwen3.py). */
export const tinyModel = fileURLToPath(new URL("../../fixtures/tiny-qwen3.gguf", import.meta.url));
/** 3,003-token vocabulary, F32 weights. */
export const tinyModelVocab2 = fileURLToPath(new URL("../../fixtures/tiny-qwen3-vocab2.gguf", import.meta.url));
/** Same vocabulary as tinyModel, Q4_0 weights. */
export const tinyModelQ4 = fileURLToPath(new URL("../../fixtures/tiny-qwen3-q4_0.gguf", import.meta.url));

/**
 * Backend the engine tests use: the CPU unless SPECDRAFT_TEST_GPU names another (e.g. `cuda` on the GPU machine, to
 * check that batched drafts equal drafts alone there too).
 */
export const testGpu = (process.env.SPECDRAFT_TEST_GPU ?? "cpu") as "cpu" | "cuda" | "vulkan";

/** Tests run single-threaded llama.cpp: the CI machine is small and shared, and spinning threads starve there. */
export const testThreads = 1;

/** One stream of the tiny fixture on the test backend, 512 tokens: what a test starts from. */
export const tinyEngineOptions = {
    modelPath: tinyModel,
    streams: 1,
    contextSize: 512,
    gpu: testGpu,
    threads: testThreads,
} as const;

/** `count` distinct prompts of 8–67 token ids below `vocabSize` (the first id is the prompt's index). */
export function randomPrompts(count: number, vocabSize: number, seed: number): number[][] {
    const random = seededRandom(seed);
    return Array.from({ length: count }, (_, i) => [
        i,
        ...Array.from({ length: 7 + random(60) }, () => random(vocabSize)),
    ]);
}
