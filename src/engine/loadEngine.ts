/**
 * Loads a GGUF drafter into a DraftEngine: reads the file's header unless the caller hands it over (clear one-line
 * errors for a missing or corrupt file), loads the native draft loop built for the chosen backend, and wraps it in the batching NativeEngine.
 */

import { defaultThreads } from "./defaultThreads.js";
import type { EngineTuning } from "./EngineTuning.js";
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
import type { ComputeBackend, DraftEngine, EngineObserver, GpuChoice, LookaheadSettings } from "./types.js";

export interface LoadEngineOptions extends EngineTuning {
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
    /** Tokens per llama_decode call. Defaults to `4096`. */
    batchSize?: number;
    /** Tokens computed at once inside a decode. Defaults to `512`. */
    ubatchSize?: number;
    /**
     * Greedy sampling inside llama.cpp's graph (llama.cpp's backend samplers): on a GPU only token ids cross to the host
     * instead of streams × vocabulary logits per step. Defaults to `true` on a GPU, `false` on the CPU.
     */
    backendSampling?: boolean;
    /** One KV buffer shared by all sequences instead of one per sequence. Defaults to `false`. */
    kvUnified?: boolean;
    /** Print llama.cpp's logs to stderr. Defaults to `false`. */
    verbose?: boolean;
    /**
     * Switches for tests and benchmarks, never for serving: they make the engine wrong on purpose (to show what a guard
     * prevents) or slower (to measure what a design saves). Defaults to none.
     */
    testing?: EngineTestingOptions;
}

export interface EngineTestingOptions {
    /**
     * Read each sequence's logits from its own thread without first applying llama.cpp's pending output reorder on one
     * thread — the race that gives wrong drafts (test/engine/logitsGuard.test.ts). Defaults to `false`.
     */
    unguardedLogits?: boolean;
    /** Batch requests in arrival order instead of KV-slot order, so llama.cpp reorders outputs. Defaults to `false`. */
    arrivalOrder?: boolean;
    /**
     * Decode steps one native run may do before it returns to JS (0: until nothing is in flight). 1 is one JS round
     * trip per step, to measure what the native run of many steps saves (bench/engineBench.ts `--max-steps-per-run`).
     * Defaults to `0`.
     */
    maxStepsPerRun?: number;
}

export async function loadEngine(options: LoadEngineOptions): Promise<DraftEngine> {
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
    const { padBatch, stepPrefill } = options;
    if (padBatch !== undefined && !(padBatch >= 0 && padBatch <= 1))
        throw new RangeError(`padBatch must be a fraction 0–1, got ${padBatch}.`);
    if (stepPrefill !== undefined && !(Number.isInteger(stepPrefill) && stepPrefill >= 0))
        throw new RangeError(`stepPrefill must be an integer ≥ 0, got ${stepPrefill}.`);

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
                unguardedLogits: options.testing?.unguardedLogits ?? false,
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
            maxStepsPerRun: options.testing?.maxStepsPerRun ?? 0,
        },
    );
}

/** The backend from the native engine's GPU device (`CUDA:NVIDIA H200`), or cpu when there is none. */
function backendOf(gpuDevice: string): ComputeBackend {
    const [registry = ""] = gpuDevice.toLowerCase().split(":");
    if (registry === "cuda" || registry === "vulkan" || registry === "metal") return registry;
    return "cpu";
}
