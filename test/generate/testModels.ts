/** Shared pieces of the generate tests: fixture paths, a CPU llama.cpp and prompts. */
import { fileURLToPath } from "node:url";
import { getLlama, type Llama, LlamaLogLevel } from "node-llama-cpp";
import type { GeneratePrompt, RunGenerateOptions } from "../../src/generate/runGenerate.js";

const fixture = (name: string): string => fileURLToPath(new URL(`../fixtures/${name}`, import.meta.url));

/** Target (Q8_0), the same weights at Q4_0 (same vocabulary: a drafter that is often right), a different vocabulary. */
export const targetModel = fixture("tiny-qwen3.gguf");
export const quantizedDrafter = fixture("tiny-qwen3-q4_0.gguf");
export const otherVocabModel = fixture("tiny-qwen3-vocab2.gguf");

/** One thread: the test machine is shared, and oversubscribed llama.cpp threads spin. */
export const testThreads = 1;

export function cpuLlama(): Promise<Llama> {
    return getLlama({ gpu: false, logLevel: LlamaLogLevel.error });
}

/** Code-like prompts: prompt lookup finds repeats in them, and the tiny models continue them differently. */
export const testPrompts: GeneratePrompt[] = [
    { id: "py", tokens: { text: "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef" } },
    { id: "ids", category: "raw", tokens: [785, 3974, 1876, 3835, 3420, 916, 279, 1567, 562, 13, 785, 3974, 1876] },
];

/** Draft tokens per step of testGenerateOptions (k). */
export const testDraftLength = 6;

/** runGenerate's options for the fixtures on the CPU but the draft: the target, testPrompts, 40 tokens, k = 6. */
export function testGenerateOptions(llama: Llama): Omit<RunGenerateOptions, "draft"> {
    return {
        target: targetModel,
        prompts: testPrompts,
        maxTokens: 40,
        draftLength: testDraftLength,
        gpu: "cpu",
        threads: testThreads,
        llama,
    };
}
