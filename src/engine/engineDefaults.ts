/**
 * The drafting defaults, each defined here once: the engine's own (streams, context size, queue, backend, batch
 * sizes) and the draft length every caller asks for when it is not told (serve's default `n`, the validator's and
 * selfcheck's k, generate's k, pack's recorded draft length, the benches). Every folder imports them from here;
 * src/server/serveDefaults.ts holds only what is serve's own.
 */
import type { GpuChoice, KvType, LookaheadSettings } from "./types.js";

/** Tokens drafted per request when nobody says otherwise. Defaults to `16`. */
export const defaultDraftLength = 16;
/** Sequences (conversations with their own KV cache) held at once. Defaults to `32`. */
export const defaultStreams = 32;
/** Most sequences one engine holds (`--streams` 1–maxStreams). */
export const maxStreams = 256;
/** Tokens one sequence holds (prompt + draft). Defaults to `4096`. */
export const defaultContextSize = 4096;
/** Requests that may wait for a free stream before new ones get queue_full. Defaults to `1024`. */
export const defaultMaxQueue = 1024;
/** Every GpuChoice, for command-line choices. */
export const gpuChoices: readonly GpuChoice[] = ["auto", "cuda", "vulkan", "cpu"];
/** Backend choice. Defaults to `auto`. */
export const defaultGpu: GpuChoice = "auto";
/** Every KvType, for command-line choices. */
export const kvTypes: readonly KvType[] = ["f16", "q8_0", "bf16", "f32"];
/** Tokens one llama_decode step may take (longer prefills continue in the next steps). Defaults to `4096`. */
export const defaultBatchSize = 4096;
/** Tokens llama.cpp computes at once inside a decode. Defaults to `512`. */
export const defaultUbatchSize = 512;
/** Pad decode steps to all streams on a GPU when half of them draft (see LoadEngineOptions.padBatch). */
export const defaultGpuPadBatch = 0.5;
/** Feed arrivals of up to 2 new tokens one token per step on a GPU (see `stepPrefill`). */
export const defaultGpuStepPrefill = 2;
/** Most candidates any step may give a sequence (`--lookahead` 0–maxLookahead). */
export const maxLookahead = 32;
/**
 * Prompt-lookup candidates per drafting sequence and step, and the step's token budget they share (LookaheadSettings,
 * src/engine/types.ts), per backend: where a step of a few tokens of one sequence costs little more than one token
 * (a GPU, launch-bound at batch 1) more candidates pay than on the CPU, where a step's cost grows with its tokens.
 * Both measured (docs/benchmarks.md, "Drafting with candidates"). CPU: M = 3 without fillers took 11–19 % off a lone
 * 16-token draft; more, or fillers, cost more than they saved. H200 (1.7B-shaped Q4_0, 2026-12-01): a step of 4
 * tokens costs 1.29× one of 1, of 8 1.65×, so with the trained drafter's tokens per step M = 3 composes the fastest
 * drafts of 16 and of 8 (14.9 / 9.0 ms against 27.6 / 14.4 plain; M = 7: 15.2 / 9.7); fillers keep one graph shape
 * (without them a step took 4.3 ms instead of 2.9); a budget of 32 tokens gives 8 streams 3 candidates each (+30 %
 * drafts/s at 8 × 512), 16 streams 1 (+2 %) and 32 streams none (unchanged; 64 tokens there cost 16 %).
 */
export const defaultLookahead: Readonly<Record<"cpu" | "gpu", LookaheadSettings>> = {
    cpu: { candidates: 3, stepTokens: 4, fill: false },
    gpu: { candidates: 3, stepTokens: 32, fill: true },
};
