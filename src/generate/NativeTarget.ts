/**
 * The target model in specdraft's native addon (the `Target` of src/generate/native/target.cpp): one
 * llama.cpp sequence whose KV cache this object tracks. `verify()` decodes a step's tokens and returns the greedy next
 * token after each position asked for, in one native call with one llama_decode; the argmax of every row is computed
 * inside llama.cpp's graph (on the GPU when offloaded), so no logits reach the host. `generate()` is the target alone,
 * its loop native. node-llama-cpp's `controlledEvaluate` instead copies every asked row's logits to the host and samples
 * each in its own call (24.3 ms for 17 rows where the decode took 9.5 at the Qwen3-8B shape on the H200).
 */
import { EngineLoadError } from "../engine/errors.js";
import { loadNativeAddon } from "../engine/nativeAddon.js";
import type { FlashAttention, GpuChoice } from "../engine/types.js";
import { type NativeTargetHandle, nativeTargetStatFields } from "./nativeTargetAddon.js";
import type { NativeTargetStats, TargetCall } from "./types.js";

/**
 * Tokens per llama_decode call: node-llama-cpp's default for a one-sequence context (min(context, 512)), so a verify
 * step decodes in the same batches as the same loop over node-llama-cpp (bench/libraryVerifiers) and computes the same
 * numbers on the CPU.
 */
const defaultTargetBatchSize = 512;

export interface NativeTargetOptions {
    modelPath: string;
    /** Tokens the sequence holds (prompt, output and one step's drafts). */
    contextSize: number;
    /** Greedy outputs a verify step may ask for: k + 1 for drafts of k. */
    maxOutputs: number;
    /** `auto` picks CUDA when built and a driver is present. */
    gpu: GpuChoice;
    /** CPU threads for llama.cpp; 0: its default. */
    threads: number;
    /** Flash attention; `auto` lets llama.cpp decide, as node-llama-cpp's contexts do. Defaults to `"auto"`. */
    flashAttention?: FlashAttention;
    /**
     * Greedy tokens by an argmax inside llama.cpp's graph (backend sampling) rather than over host logits.
     * Defaults to `true`.
     */
    backendSampling?: boolean;
    /** Tokens per llama_decode call. Defaults to `min(contextSize, 512)`. */
    batchSize?: number;
    /** Print llama.cpp's logs. Defaults to `false`. */
    verbose?: boolean;
}

export class NativeTarget {
    readonly vocabSize: number;
    /** Tokens the sequence holds. */
    readonly contextSize: number;
    /** Greedy outputs one verify step may ask for. */
    readonly maxOutputs: number;
    /** `CUDA:NVIDIA H200`; empty on the CPU. */
    readonly gpuDevice: string;
    /** End-of-generation token ids: the target stops after producing one (it is not part of the output). */
    readonly eogIds: ReadonlySet<number>;
    /** Totals of every call so far. */
    readonly stats: NativeTargetStats = { decodes: 0, tokens: 0, submitMs: 0, waitMs: 0, readMs: 0, graphsReused: 0 };
    private readonly native: NativeTargetHandle;
    private cachedTokens = 0;

    private constructor(native: NativeTargetHandle) {
        this.native = native;
        const info = native.info();
        this.vocabSize = info.vocabSize;
        this.contextSize = info.contextSize;
        this.maxOutputs = info.maxOutputs;
        this.gpuDevice = info.gpuDevice;
        this.eogIds = new Set(info.eogIds);
    }

    /** Loads the model; throws EngineLoadError with llama.cpp's reason when it cannot. */
    static async load(options: NativeTargetOptions): Promise<NativeTarget> {
        const addon = loadNativeAddon(options.gpu);
        const native = addon.create<NativeTargetHandle>("Target");
        const batchSize = options.batchSize ?? Math.min(options.contextSize, defaultTargetBatchSize);
        try {
            await native.load({
                binsDir: addon.binsDir,
                modelPath: options.modelPath,
                contextSize: options.contextSize,
                batchSize,
                ubatchSize: batchSize,
                gpuLayers: addon.variant === "cpu" ? 0 : -1,
                flashAttention: options.flashAttention ?? "auto",
                backendSampling: options.backendSampling ?? true,
                maxOutputs: Math.min(options.maxOutputs, batchSize),
                threads: options.threads,
                verbose: options.verbose ?? false,
            });
        } catch (error) {
            const reason = error instanceof Error ? error.message : String(error);
            throw new EngineLoadError(`Cannot load target ${options.modelPath}: ${reason}`);
        }
        return new NativeTarget(native);
    }

    /** Tokens in the KV cache (the verified ones, and the drafts of the last step until the next call trims them). */
    get cached(): number {
        return this.cachedTokens;
    }

    /**
     * Keeps the first `keep` cached tokens, decodes `tokens` after them and returns the greedy next token after each of
     * tokens[outputFrom..] (tokens.length − outputFrom ≤ maxOutputs).
     */
    async verify(tokens: readonly number[], keep: number, outputFrom: number): Promise<number[]> {
        const { next, cached, stats } = await this.native.evaluate(Int32Array.from(tokens), keep, outputFrom);
        this.cachedTokens = cached;
        this.add(stats);
        return Array.from(next);
    }

    /**
     * The target alone: `prompt` from an empty cache, then up to `maxTokens` greedy tokens, one decode each; an
     * end-of-generation token ends the output and is not included.
     */
    async generate(prompt: readonly number[], maxTokens: number): Promise<number[]> {
        const { tokens, cached, stats } = await this.native.generate(Int32Array.from(prompt), 0, maxTokens);
        this.cachedTokens = cached;
        this.add(stats);
        return Array.from(tokens);
    }

    /** Whether `token` ends the output (one of eogIds). */
    isEog(token: number): boolean {
        return this.eogIds.has(token);
    }

    /**
     * The logits of token `row` of the last of `calls` (by default its last output) after decoding all of them as
     * verify() and generate() decode, in a context of its own with this target's settings (this target's KV cache is
     * left as it was): llama.cpp's numbers depend on how the tokens were split into decodes and which rows were outputs,
     * so replaying a run's calls gives the logits that run computed.
     */
    async replayLogits(calls: readonly TargetCall[], row?: number): Promise<Float32Array> {
        const last = calls.at(-1);
        if (last === undefined) throw new RangeError("replayLogits: expected at least one call");
        const tokens = calls.flatMap((call) => call.tokens);
        const flat = calls.flatMap((call) => [
            call.keep,
            call.tokens.length,
            call.outputFrom,
            call.outputTo ?? call.tokens.length,
        ]);
        const at = row ?? (last.outputTo ?? last.tokens.length) - 1;
        return this.native.replay(Int32Array.from(tokens), Int32Array.from(flat), at);
    }

    /**
     * How near a tie the target alone's choice between `a` and `b` after `prompt` + `generated` was, and how much its
     * one-token and multi-token decodes disagree there: `gap` = logit[a] − logit[b] as the target alone computes it
     * (aloneCalls), `disagreement` = the largest logit difference between that and one decode of the same tokens + [b]
     * with the one output there. The draft engine's tests and benches judge its candidates by it.
     */
    async logitGap(
        prompt: readonly number[],
        generated: readonly number[],
        a: number,
        b: number,
    ): Promise<{ gap: number; disagreement: number }> {
        for (const token of [a, b])
            if (!Number.isInteger(token) || token < 0 || token >= this.vocabSize)
                throw new RangeError(`logitGap: token ids out of the vocabulary (${token})`);
        const tokens = [...prompt, ...generated];
        const alone = await this.replayLogits(aloneCalls(prompt, generated));
        const oneDecode = await this.replayLogits([
            { keep: 0, tokens: [...tokens, b], outputFrom: tokens.length - 1, outputTo: tokens.length },
        ]);
        return { gap: (alone[a] ?? 0) - (alone[b] ?? 0), disagreement: largestDifference(alone, oneDecode) };
    }

    dispose(): void {
        this.native.dispose();
    }

    private add(stats: Float64Array): void {
        if (stats.length !== nativeTargetStatFields)
            throw new Error(`native target stats: expected ${nativeTargetStatFields} numbers, got ${stats.length}`);
        // the length check makes all six present; the defaults only satisfy the index check
        const [decodes = 0, tokens = 0, submitMs = 0, waitMs = 0, readMs = 0, graphsReused = 0] = stats;
        this.stats.decodes += decodes;
        this.stats.tokens += tokens;
        this.stats.submitMs += submitMs;
        this.stats.waitMs += waitMs;
        this.stats.readMs += readMs;
        this.stats.graphsReused += graphsReused;
    }
}

/**
 * The calls with which the target alone generates `generated` after `prompt` and asks for the logits after them
 * (NativeTarget.generate's decodes, and node-llama-cpp's `sequence.evaluate()`'s): the prompt in one call with an output
 * at its last token, then each generated token in a call of its own.
 */
export function aloneCalls(prompt: readonly number[], generated: readonly number[]): TargetCall[] {
    const calls: TargetCall[] = [{ keep: 0, tokens: prompt.slice(), outputFrom: prompt.length - 1 }];
    for (const [i, token] of generated.entries())
        calls.push({ keep: prompt.length + i, tokens: [token], outputFrom: 0 });
    return calls;
}

/** The largest |a[v] − b[v]| over the vocabulary. */
export function largestDifference(a: Float32Array, b: Float32Array): number {
    let largest = 0;
    for (let v = 0; v < a.length; v++) largest = Math.max(largest, Math.abs((a[v] ?? 0) - (b[v] ?? 0)));
    return largest;
}
