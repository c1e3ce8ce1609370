/**
 * The `Target` class of specdraft's native addon (src/generate/native/target.cpp) as seen from TypeScript: what its load()
 * takes and what its calls return. src/generate/NativeTarget.ts wraps it; src/engine/nativeAddon.ts loads the addon.
 */
import type { FlashAttention } from "../engine/types.js";

/** What the native Target loads: one sequence of a target model (src/generate/NativeTarget.ts). Every field is required. */
export interface NativeTargetLoadOptions {
    binsDir: string;
    modelPath: string;
    /** Tokens the sequence holds. */
    contextSize: number;
    /** Tokens one llama_decode call takes (longer inputs are decoded in several). */
    batchSize: number;
    ubatchSize: number;
    /** Layers offloaded to the GPU; -1: all, 0: none. */
    gpuLayers: number;
    /** `auto`: llama.cpp decides (node-llama-cpp's default for its contexts too). */
    flashAttention: FlashAttention;
    /** Greedy tokens computed by an argmax inside llama.cpp's graph (only ids copied back) instead of over host logits. */
    backendSampling: boolean;
    /** Greedy outputs one evaluate() may ask for: k + 1 to verify drafts of k. */
    maxOutputs: number;
    /** CPU threads for llama.cpp; 0: its default. */
    threads: number;
    verbose: boolean;
}

/**
 * Numbers in a target call's `stats`: llama_decode calls, tokens decoded, submit ms (the llama_decode calls), wait ms
 * (llama_synchronize after each), read ms (fetching sampled ids or the argmax over logits), graphs llama.cpp reused.
 */
export const nativeTargetStatFields = 6;

export interface NativeTargetHandle {
    load(options: NativeTargetLoadOptions): Promise<void>;
    info(): { vocabSize: number; contextSize: number; gpuDevice: string; maxOutputs: number; eogIds: Int32Array };
    /**
     * Trims the KV cache to its first `keep` cells, decodes `tokens` after them and returns the greedy next token after
     * each of tokens[outputFrom..] (at most maxOutputs), all in one call.
     */
    evaluate(
        tokens: Int32Array,
        keep: number,
        outputFrom: number,
    ): Promise<{ next: Int32Array; cached: number; stats: Float64Array }>;
    /**
     * The target alone: `tokens` after `keep` cached ones, then greedy tokens until an end-of-generation one (not
     * included) or maxTokens. `cached`: tokens now in the KV cache.
     */
    generate(
        tokens: Int32Array,
        keep: number,
        maxTokens: number,
    ): Promise<{ tokens: Int32Array; cached: number; stats: Float64Array }>;
    /**
     * In a context of its own (this target's KV cache is left as it was): decodes `calls` one after another, each
     * `[keep, count, outputFrom, outputTo]` (trim the cache to `keep` tokens, decode the next `count` of `tokens` as
     * evaluate() does, outputs for indices [outputFrom, outputTo)), and returns the logits of index `row` of the last.
     */
    replay(tokens: Int32Array, calls: Int32Array, row: number): Promise<Float32Array>;
    dispose(): void;
}
