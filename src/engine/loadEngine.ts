/**
 * Loads a GGUF drafter into a DraftEngine: reads the file's header (clear one-line errors for a missing or corrupt
 * file), loads the native draft loop built for the chosen backend, and wraps it in the batching NativeEngine.
 */

import { defaultThreads } from "./defaultThreads.js";
import { EngineLoadError } from "./errors.js";
import { readModelFileInfo } from "./gguf.js";
import { defaultMaxQueue, NativeEngine } from "./NativeEngine.js";
import { type GpuChoice, loadNativeAddon, type NativeEngineHandle } from "./nativeAddon.js";
import { type KvType, readEngineEnv } from "./readEngineEnv.js";
import type { ComputeBackend, DraftEngine, EngineObserver } from "./types.js";

export { type GpuChoice, gpuChoices } from "./nativeAddon.js";
export type { KvType } from "./readEngineEnv.js";

/** Sequences (conversations with their own KV cache) held at once. Defaults to `32`. */
export const defaultStreams = 32;
/** Tokens one sequence holds (prompt + draft). Defaults to `4096`. */
export const defaultContextSize = 4096;
/** Backend choice. Defaults to `auto`. */
export const defaultGpu: GpuChoice = "auto";
/** Tokens one llama_decode step may take (longer prefills continue in the next steps). Defaults to `4096`. */
export const defaultBatchSize = 4096;
/** Tokens llama.cpp computes at once inside a decode. Defaults to `512`. */
export const defaultUbatchSize = 512;

export interface LoadEngineOptions {
    modelPath: string;
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
     * thread — the race that gives wrong drafts. Also set by the environment variable SPECDRAFT_UNGUARDED_LOGITS=1.
     * Defaults to `false`.
     */
    unguardedLogits?: boolean;
    /** Batch requests in arrival order instead of KV-slot order, so llama.cpp reorders outputs. Defaults to `false`. */
    arrivalOrder?: boolean;
}

/** Pad decode steps to all streams on a GPU when half of them draft (see `padBatch`). */
export const defaultGpuPadBatch = 0.5;

export async function loadEngine(givenOptions: LoadEngineOptions): Promise<DraftEngine> {
    // options given win over SPECDRAFT_* variables
    const options: LoadEngineOptions =
        (givenOptions.useEnv ?? true) ? { ...readEngineEnv(), ...definedOnly(givenOptions) } : givenOptions;
    const streams = options.streams ?? defaultStreams;
    const contextSize = options.contextSize ?? defaultContextSize;
    if (!Number.isInteger(streams) || streams < 1 || streams > 256)
        throw new RangeError(`streams must be 1–256, got ${streams}.`);
    if (!Number.isInteger(contextSize) || contextSize < 2)
        throw new RangeError(`contextSize must be ≥ 2, got ${contextSize}.`);

    const file = await readModelFileInfo(options.modelPath);
    const addon = loadNativeAddon(options.gpu ?? defaultGpu);
    const wantsGpu = addon.variant !== "cpu";
    const load = async (onGpu: boolean): Promise<NativeEngineHandle> => {
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
                flashAttention: options.flashAttention ?? onGpu,
                backendSampling: options.backendSampling ?? onGpu,
                kvUnified: options.kvUnified ?? false,
                kvType: options.kvType ?? "",
                padBatch: options.padBatch ?? (onGpu ? defaultGpuPadBatch : 0),
                threads: options.threads ?? defaultThreads(),
                unguardedLogits: options.testing?.unguardedLogits ?? process.env.SPECDRAFT_UNGUARDED_LOGITS === "1",
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
    const registry = gpuDevice.split(":")[0].toLowerCase();
    if (registry === "cuda" || registry === "vulkan" || registry === "metal") return registry;
    return "cpu";
}
