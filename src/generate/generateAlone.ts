/** The baseline: the target generating greedily by itself, one token per decode, through node-llama-cpp. */
import type { LlamaContextSequence, Token } from "node-llama-cpp";
import type { GenerationRun } from "./types.js";

/**
 * Generates up to `maxTokens` greedy tokens after `prompt` on `sequence` (a sequence without a token predictor).
 * The sequence's history is cleared first, so every run evaluates its prompt from scratch.
 */
export async function generateAlone(
    sequence: LlamaContextSequence,
    prompt: readonly number[],
    maxTokens: number,
): Promise<GenerationRun> {
    await sequence.clearHistory();
    const tokens: number[] = [];
    const started = performance.now();
    for await (const token of sequence.evaluate(prompt.slice() as Token[], { temperature: 0 })) {
        tokens.push(token);
        if (tokens.length >= maxTokens) break;
    }
    const seconds = (performance.now() - started) / 1000;
    return { tokens, seconds, targetSteps: tokens.length, drafted: 0, accepted: 0, draftSeconds: 0 };
}
