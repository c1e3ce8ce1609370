/**
 * Loads a GGUF drafter into a DraftEngine: reads the file's header unless the caller hands it over (clear one-line
 * errors for a missing or corrupt file), loads the native draft loop built for the chosen backend, and wraps it in the batching NativeEngine.
 */

import { defaultThreads } from "./defaultThreads.js";
import {
    defaultBatchSize,
    defaultContextSize,
    defaultGpu,
    defaultGpuPadBatch,
    defaultGpuStepPrefill,
    defaultLookahead,
    defaultMaxQueue,
    defaultStreams,
    defaultUbatchSize,
    maxLookahead,
    maxStreams,
} from "./engineDefaults.js";
import { EngineLoadError } from "./errors.js";
import { type ModelFileInfo, readModelFileInfo } from "./gguf.js";
import { NativeEngine } from "./NativeEngine.js";
import { loadNativeAddon, type NativeEngineHandle } from "./nativeAddon.js";
import { type EngineEnvSettings, type KvType, readEngineEnv } from "./readEngineEnv.js";
import type { ComputeBackend, DraftEngine, EngineObserver, GpuChoice, LookaheadSettings } from "./types.js";

export interface LoadEngineOptions {
    modelPath: string;
    /**
     * `modelPath`'s header as readModelFileInfo gave it, when the caller has read it already (serve reads it before it
     * listens, generate before it loads weights, to check the vocabulary), so the file's header is read once. Defaults to
     * reading it here.
     */
    modelFile?: ModelFileInfo;
    /** Sequences held at once (each with its own KV cache of `contextSize` tokens). Defaults to `32`. */
    streams?: number;
    /** Tokens per sequence: a request's prompt plus its draft must fit. Defaults to `4096`. */
    contextSize?: number;
    /** Where to compute: `auto` (CUDA if built and a driver is present, else CPU), `cuda`, `vulkan` or `cpu`. Defaults to `auto`. */
    gpu?: GpuChoice;
    /** Requests that may wait for a free stream before new ones get queue_full. Defaults to `1024`. */
    maxQueue?: number;
    /** Receives decode, prefix and queue counters. Defaults to none. */
    observer?: EngineObserver;
    /**
     * CPU threads for llama.cpp. ggml's threads spin while they wait for each other, so on a busy machine every thread
     * beyond the free cores costs far more than it gives (a 2-core machine under load drafted 500× slower with 2 than
     * with 1). Defaults to the number of CPUs − 1, at least 1 and at most 8.
     */
    threads?: number;
    /** Tokens per llama_decode call. Defaults to `4096`. */
    batchSize?: number;
    /** Tokens computed at once inside a decode. Defaults to `512`. */
    ubatchSize?: number;
    /**
     * Flash attention. On the CPU it made batched drafts differ from drafts computed alone (its accumulation order
     * depends on the batch), so it is off there unless forced here. Defaults to `true` on a GPU, `false` on the CPU.
     */
    flashAttention?: boolean;
    /**
     * Greedy sampling inside llama.cpp's graph (llama.cpp's backend samplers): on a GPU only token ids cross to the host
     * instead of streams × vocabulary logits per step. Defaults to `true` on a GPU, `false` on the CPU.
     */
    backendSampling?: boolean;
    /**
     * KV cache element type for keys and values. `q8_0` halves the bytes every step's attention reads (what makes long
     * contexts slower on a GPU) at a small numeric cost; llama.cpp needs flash attention for a quantized V cache.
     * Defaults to `f16` (llama.cpp's default).
     */
    kvType?: KvType;
    /**
     * Pad decode steps to all streams when at least this fraction of them drafts (0: never): idle streams get a
     * throwaway token past their cached prefix, so every step has the same shape and sequence set. llama.cpp reuses its
     * compute graph only for the same sequences (with per-sequence KV), and ggml-cuda replays a CUDA graph only after
     * two calls with the same graph, so with requests joining and leaving at every few steps most steps run without
     * a CUDA graph. Costs the idle streams' attention. On the H200 (bench/results/2026-11-30-h200-engine-matrix) 0.5
     * raised 32-stream throughput 17 % at context 512 (graph reuse 56 % → 94 % of steps); on the CPU it only costs.
     * Defaults to `0.5` on a GPU, `0` on the CPU.
     */
    padBatch?: number;
    /**
     * Arrivals with 2 to this many new tokens (0: none) are fed one token per step, each step asking an output, instead
     * of all in one step. A multi-token step has another shape than drafting steps: llama.cpp rebuilds its graph, and
     * ggml-cuda, which keys its CUDA graphs by the graph's first node (the same for both shapes), runs the next two
     * steps without a CUDA graph and captures one again on the third. In a generation most requests bring 1 new token
     * (a rejected draft) or 2 (a fully accepted one), so at 2 the steps keep one shape throughout at the price of one
     * more one-token decode. On the CPU there is no CUDA graph and a multi-token step is cheaper than several.
     * Defaults to `2` on a GPU (expected to win there, measured by bench/gpu/real-shape.sh), `0` on the CPU.
     */
    stepPrefill?: number;
    /**
     * Candidates per drafting sequence and step (0: off): each drafter step decodes, after a sequence's own token, up to
     * this many guesses of the tokens that follow, found by prompt lookup over the request's own tokens (context and
     * draft so far: what followed the most recent earlier occurrence of its last 3, else 2, else 1 tokens), and keeps the
     * guesses equal to the drafter's greedy choice with the greedy token after them. The draft is the drafter's greedy
     * continuation either way; only the number of steps changes. Defaults to the backend's (engineDefaults.ts:
     * defaultLookahead): `3` on the CPU, `7` on a GPU.
     */
    lookahead?: number;
    /**
     * A step's token budget the candidates share: each of a step's S sequences gets min(lookahead, ⌊this / S⌋ − 1), so a
     * lone request gets the most and a full batch fewer or none. Defaults to the backend's: `4` on the CPU, `64` on a GPU.
     */
    lookaheadStepTokens?: number;
    /**
     * Decode that many candidate positions always (fillers where the lookup has fewer guesses), so every step has the
     * same shape and llama.cpp and ggml-cuda reuse their graphs. Defaults to `false` on the CPU, `true` on a GPU.
     */
    lookaheadFill?: boolean;
    /**
     * Decode steps one native run may do before it returns to JS (0: until nothing is in flight or a request could
     * join). 1 is the old one-round-trip-per-step loop, kept for comparison. Defaults to `0`.
     */
    maxStepsPerRun?: number;
    /** One KV buffer shared by all sequences instead of one per sequence. Defaults to `false`. */
    kvUnified?: boolean;
    /** Print llama.cpp's logs to stderr. Defaults to `false`. */
    verbose?: boolean;
    /**
     * Read SPECDRAFT_* environment variables for the options not given here (see readEngineEnv.ts: KV type, backend
     * sampling, flash attention, batch sizes, threads, steps per run). Defaults to `true`.
     */
    useEnv?: boolean;
    /** Knobs that make the engine WRONG on purpose, so tests can show what the guards prevent. Defaults to none. */
    testing?: EngineTestingOptions;
}

export interface EngineTestingOptions {
    /**
     * Read each sequence's logits from its own thread without first applying llama.cpp's pending output reorder on one
     * thread — the race that gives wrong drafts. Also set by the environment variable SPECDRAFT_UNGUARDED_LOGITS=1
     * (with `useEnv`). Defaults to `false`.
     */
    unguardedLogits?: boolean;
    /** Batch requests in arrival order instead of KV-slot order, so llama.cpp reorders outputs. Defaults to `false`. */
    arrivalOrder?: boolean;
}

export async function loadEngine(givenOptions: LoadEngineOptions): Promise<DraftEngine> {
    // options given win over SPECDRAFT_* variables
    const { unguardedLogits: envUnguardedLogits, ...envOptions }: EngineEnvSettings =
        (givenOptions.useEnv ?? true) ? readEngineEnv() : {};
    const options: LoadEngineOptions = { ...envOptions, ...definedOnly(givenOptions) };
    const streams = options.streams ?? defaultStreams;
    const contextSize = options.contextSize ?? defaultContextSize;
    if (!Number.isInteger(streams) || streams < 1 || streams > maxStreams)
        throw new RangeError(`streams must be 1–${maxStreams}, got ${streams}.`);
    if (!Number.isInteger(contextSize) || contextSize < 2)
        throw new RangeError(`contextSize must be ≥ 2, got ${contextSize}.`);
    const { lookahead, lookaheadStepTokens } = options;
    if (lookahead !== undefined && !(Number.isInteger(lookahead) && lookahead >= 0 && lookahead <= maxLookahead))
        throw new RangeError(`lookahead must be an integer 0–${maxLookahead}, got ${lookahead}.`);
    if (lookaheadStepTokens !== undefined && !(Number.isInteger(lookaheadStepTokens) && lookaheadStepTokens >= 1))
        throw new RangeError(`lookaheadStepTokens must be an integer ≥ 1, got ${lookaheadStepTokens}.`);

    const file = options.modelFile ?? (await readModelFileInfo(options.modelPath));
    const addon = loadNativeAddon(options.gpu ?? defaultGpu);
    const wantsGpu = addon.variant !== "cpu";
    const lookaheadFor = (onGpu: boolean): LookaheadSettings => {
        const fallback = defaultLookahead[onGpu ? "gpu" : "cpu"];
        return {
            candidates: options.lookahead ?? fallback.candidates,
            stepTokens: options.lookaheadStepTokens ?? fallback.stepTokens,
            fill: options.lookaheadFill ?? fallback.fill,
        };
    };
    const load = async (onGpu: boolean): Promise<NativeEngineHandle> => {
        const lookahead = lookaheadFor(onGpu);
        const native = addon.createEngine();
        try {
            await native.load({
                binsDir: addon.binsDir,
                modelPath: options.modelPath,
                streams,
                contextSize,
                batchSize: Math.max(options.batchSize ?? defaultBatchSize, streams),
                ubatchSize: options.ubatchSize ?? defaultUbatchSize,
                gpuLayers: wantsGpu ? -1 : 0,
                flashAttention: (options.flashAttention ?? onGpu) ? "on" : "off",
                backendSampling: options.backendSampling ?? onGpu,
                kvUnified: options.kvUnified ?? false,
                kvType: options.kvType ?? "",
                padBatch: options.padBatch ?? (onGpu ? defaultGpuPadBatch : 0),
                stepPrefill: options.stepPrefill ?? (onGpu ? defaultGpuStepPrefill : 0),
                lookahead: lookahead.candidates,
                lookaheadStepTokens: lookahead.stepTokens,
                lookaheadFill: lookahead.fill,
                threads: options.threads ?? defaultThreads(),
                unguardedLogits: options.testing?.unguardedLogits ?? envUnguardedLogits ?? false,
                arrivalOrder: options.testing?.arrivalOrder ?? false,
                verbose: options.verbose ?? false,
            });
        } catch (error) {
            const reason = error instanceof Error ? error.message : String(error);
            throw new EngineLoadError(`Cannot load model ${options.modelPath}: ${reason}`);
        }
        return native;
    };
    let native = await load(wantsGpu);
    let nativeInfo = native.info();
    let onGpu = backendOf(nativeInfo.gpuDevice) !== "cpu";
    if (wantsGpu && !onGpu) {
        // a GPU build that found no GPU computes on the CPU: load again with the CPU's defaults
        native.dispose();
        native = await load(false);
        nativeInfo = native.info();
        onGpu = false;
    }
    const flashAttention = options.flashAttention ?? onGpu;
    if (nativeInfo.vocabSize !== file.vocabSize) {
        native.dispose();
        throw new EngineLoadError(
            `Model ${options.modelPath}: llama.cpp sees ${nativeInfo.vocabSize} tokens but the GGUF lists ${file.vocabSize}.`,
        );
    }
    const backend = backendOf(nativeInfo.gpuDevice);
    return new NativeEngine(
        native,
        {
            ...file,
            contextSize,
            streams,
            backend,
            engine: "native",
            flashAttention,
            lookahead: lookaheadFor(onGpu),
        },
        {
            maxQueue: options.maxQueue ?? defaultMaxQueue,
            observer: options.observer,
            maxStepsPerRun: options.maxStepsPerRun ?? 0,
        },
    );
}

/** `options` without the keys whose value is undefined (so they do not hide an environment setting). */
function definedOnly(options: LoadEngineOptions): LoadEngineOptions {
    return Object.fromEntries(
        Object.entries(options).filter(([, value]) => value !== undefined),
    ) as unknown as LoadEngineOptions;
}

/** The backend from the native engine's GPU device (`CUDA:NVIDIA H200`), or cpu when there is none. */
function backendOf(gpuDevice: string): ComputeBackend {
    const [registry = ""] = gpuDevice.toLowerCase().split(":");
    if (registry === "cuda" || registry === "vulkan" || registry === "metal") return registry;
    return "cpu";
}
