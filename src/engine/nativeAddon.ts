/**
 * The native draft loop (src/engine/native/draft_engine.h) as seen from TypeScript: its typed interface, and which
 * build of the addon to load (the addon also holds generate's target, typed in src/generate/nativeTargetAddon.ts). `scripts/build-native.mjs` writes one build per llama.cpp binary set to
 * build/native/<variant>/ (cpu, cuda, vulkan), with a variant.json naming the folder of its llama.cpp libraries.
 */

import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { EngineLoadError } from "./errors.js";
import type { FlashAttention, GpuChoice } from "./types.js";

export type NativeVariant = "cpu" | "cuda" | "vulkan";

/** What the native load() takes: every field, always (it has no defaults of its own; a missing one is a TypeError). */
export interface NativeLoadOptions {
    /** Folder of the llama.cpp libraries, from which backends built as loadable modules are loaded. */
    binsDir: string;
    modelPath: string;
    streams: number;
    /** Tokens per sequence. */
    contextSize: number;
    /** Tokens one llama_decode call may take. */
    batchSize: number;
    /** Tokens llama.cpp computes at once inside a decode. */
    ubatchSize: number;
    /** Layers offloaded to the GPU; -1: all, 0: none. */
    gpuLayers: number;
    flashAttention: FlashAttention;
    /** One KV buffer for all sequences (true) or one per sequence (false). */
    kvUnified: boolean;
    /** Greedy sampling inside llama.cpp's graph (only token ids copied back) instead of argmax over host logits. */
    backendSampling: boolean;
    /** KV cache element type (`f16`, `q8_0`, `bf16`, `f32`); empty: llama.cpp's default (f16). */
    kvType: string;
    /**
     * Pad decode steps to all streams (idle ones get a throwaway token) when at least this fraction of the streams
     * drafts, so the batch's shape and sequence set stay the same from step to step; 0: never.
     */
    padBatch: number;
    /** CPU threads for llama.cpp; 0: its default. */
    threads: number;
    /** Tests only: read logits from many threads at once, without the reorder guard. */
    unguardedLogits: boolean;
    /** Tests only: batch requests in arrival order instead of slot order (llama.cpp then reorders the outputs). */
    arrivalOrder: boolean;
    /**
     * Arrivals with 2 to this many new tokens are fed one token (with an output) per step, so every step keeps a
     * drafting step's shape and ggml-cuda keeps replaying its CUDA graph; 0: never.
     */
    stepPrefill: number;
    /**
     * Candidates per drafting sequence and step (0: none): guesses by prompt lookup over the sequence's own tokens,
     * decoded after its frontier token in the same llama_decode, kept where they equal the drafter's greedy tokens.
     */
    lookahead: number;
    /** A step's token budget: each of its S sequences gets min(lookahead, ⌊lookaheadStepTokens / S⌋ − 1) candidates. */
    lookaheadStepTokens: number;
    /** Always decode that many candidate positions (fillers where the lookup has fewer), so steps keep one shape. */
    lookaheadFill: boolean;
    /** Print llama.cpp's logs to stderr. */
    verbose: boolean;
}

/** A request joining the batch. */
export interface NativeArrival {
    /** The caller's request id, echoed in its result. */
    id: number;
    /** Sequence id whose KV cache the request uses (not used by another request in flight). */
    slot: number;
    /** Leading tokens of the slot's cache to keep; the rest is removed. */
    keep: number;
    /** Tokens to evaluate after the kept ones (at least one). */
    tokens: Int32Array;
    /** Tokens to draft (at least one). */
    n: number;
    /** -1: none. */
    endId: number;
}

export interface NativeFinishedDraft {
    id: number;
    draft: Int32Array;
    /** Tokens (prompt, then draft) now in the slot's KV cache. */
    cached: number;
    /** Tokens the request put through llama_decode. */
    evaluated: number;
}

/**
 * Numbers per decode step in `steps`: tokens, sequences, decode ms, sample ms, host ms, graphs reused, submit ms (the
 * llama_decode call; part of decode ms), wait ms (llama_synchronize after it; the rest of decode ms), draft tokens
 * produced, candidate positions decoded, of those fillers, candidates kept.
 */
export const nativeStepFields = 12;

/** What a run reports mid-call (drafts that finished while later steps go on) and at its end. */
export interface NativeRunProgress {
    /** Requests that finished (or were cancelled). */
    finished: NativeFinishedDraft[];
    /**
     * `nativeStepFields` numbers per decode step since the last report: tokens and sequences of its llama_decode; ms in
     * llama_decode + llama_synchronize (the device's work); ms fetching outputs and taking their argmax; ms since the
     * previous step ended (batch building, plus the JS round trip before a run's first step when requests were left in
     * flight; time with nothing to do is not counted); compute graphs llama.cpp reused instead of rebuilding (one per
     * ubatch; ggml-cuda replays a CUDA graph only for a reused graph); ms in the llama_decode call itself (on a GPU the
     * host's part: graph reuse or rebuild, inputs, launches) and ms in llama_synchronize after it; draft tokens the step
     * produced; candidate positions it decoded (lookahead), of those fillers, and the candidates kept.
     */
    steps: Float64Array;
}

export interface NativeRunResult extends NativeRunProgress {
    /** Requests still in flight. */
    active: number;
}

export interface NativeEngineHandle {
    load(options: NativeLoadOptions): Promise<void>;
    info(): { vocabSize: number; contextSizePerSequence: number; gpuDevice: string };
    /**
     * Adds `arrivals`, drops the requests in `cancelIds`, then runs decode steps (one llama_decode for everything in
     * flight each), taking what submit() hands it before each step, until nothing is in flight or `maxSteps` steps ran
     * (0: no limit). Drafts that finish before the end come through `onProgress`; the rest, and the last steps'
     * counters, in the result.
     */
    run(
        arrivals: NativeArrival[],
        cancelIds: Int32Array,
        maxSteps: number,
        onProgress: (progress: NativeRunProgress) => void,
    ): Promise<NativeRunResult>;
    /**
     * Hands arrivals and cancels to the run in flight (taken before its next step; arrivals before cancels). Returns
     * false, taking nothing, when no run is live (none started, or it is ending): pass them to the next run() then.
     */
    submit(arrivals: NativeArrival[], cancelIds: Int32Array): boolean;
    /** Frees the model; no step may be running. */
    dispose(): void;
}

/** The addon's exports: its classes by name (the draft `Engine`, and generate's `Target`). */
type NativeModule = Record<string, unknown>;

export interface LoadedAddon {
    variant: NativeVariant;
    binsDir: string;
    createEngine(): NativeEngineHandle;
    /**
     * A new instance of another class the addon exports, seen through the typed interface `Handle` its user declares
     * (generate's `Target`: src/generate/nativeTargetAddon.ts). Throws EngineLoadError when the build lacks it.
     */
    create<Handle extends object>(className: string): Handle;
}

/**
 * build/native under the package root: the nearest folder above this module that holds a package.json (this file
 * lives in src/engine or dist/engine, or is bundled into a GPU job's script under .gpu-extra/).
 */
const nativeBuildDir = join(packageRoot(dirname(fileURLToPath(import.meta.url))), "build", "native");

function packageRoot(from: string): string {
    for (let dir = from; ; dir = dirname(dir)) {
        if (existsSync(join(dir, "package.json"))) return dir;
        if (dirname(dir) === dir) return resolve(from, "..", "..");
    }
}

/** Loads the native engine build for `gpu`; throws EngineLoadError saying how to build it when it is missing. */
export function loadNativeAddon(gpu: GpuChoice): LoadedAddon {
    const variant = pickVariant(gpu);
    const dir = join(nativeBuildDir, variant);
    const addonPath = join(dir, "specdraft_engine.node");
    if (!existsSync(addonPath)) {
        const command = variant === "cpu" ? "npm run build:native" : `node scripts/build-native.mjs --gpu ${variant}`;
        throw new EngineLoadError(
            `native engine not built${variant === "cpu" ? "" : ` for ${variant}`}: run ${command}`,
        );
    }
    let binsDir: string;
    try {
        const variantInfo = JSON.parse(readFileSync(join(dir, "variant.json"), "utf8")) as { binsDir: string };
        binsDir = resolve(dir, variantInfo.binsDir);
    } catch {
        throw new EngineLoadError(
            `native engine build in ${dir} is incomplete (no variant.json): run npm run build:native`,
        );
    }
    const require = createRequire(import.meta.url);
    let module: NativeModule;
    try {
        module = require(addonPath) as NativeModule;
    } catch (error) {
        const reason = error instanceof Error ? error.message : String(error);
        throw new EngineLoadError(`cannot load the ${variant} native engine ${addonPath}: ${reason}`);
    }
    const create = <Handle extends object>(className: string): Handle => {
        const exported = module[className];
        if (typeof exported !== "function")
            throw new EngineLoadError(
                `the ${variant} native engine ${addonPath} has no ${className}: run npm run build:native`,
            );
        return new (exported as new () => Handle)();
    };
    return { variant, binsDir, createEngine: () => create<NativeEngineHandle>("Engine"), create };
}

function pickVariant(gpu: GpuChoice): NativeVariant {
    if (gpu !== "auto") return gpu;
    // CUDA only where its build exists and an NVIDIA driver is present; Vulkan only when asked for
    if (existsSync(join(nativeBuildDir, "cuda", "specdraft_engine.node")) && existsSync("/dev/nvidiactl"))
        return "cuda";
    return "cpu";
}
