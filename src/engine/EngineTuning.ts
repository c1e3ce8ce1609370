/**
 * The draft engine's tuning: what a user may set for their hardware and workload (serve's options, docs/engine.md),
 * each defaulted by loadEngine for the backend it finds.
 */
import type { KvType } from "./types.js";

export interface EngineTuning {
    /**
     * Candidates per drafting sequence and step (0: off): each drafter step decodes, after a sequence's own token, up to
     * this many guesses of the tokens that follow, found by prompt lookup over the request's own tokens (context and
     * draft so far: what followed the most recent earlier occurrence of its last 3, else 2, else 1 tokens), and keeps the
     * guesses equal to the drafter's greedy choice with the greedy token after them. The draft is the drafter's greedy
     * continuation either way; only the number of steps changes. Defaults to the backend's (engineDefaults.ts:
     * defaultLookahead): `3` on the CPU and on a GPU.
     */
    lookahead?: number;
    /**
     * A step's token budget the candidates share: each of a step's S sequences gets min(lookahead, ⌊this / S⌋ − 1), so a
     * lone request gets the most and a full batch fewer or none. Defaults to the backend's: `4` on the CPU, `32` on a GPU.
     */
    lookaheadStepTokens?: number;
    /**
     * Decode that many candidate positions always (fillers where the lookup has fewer guesses), so every step has the
     * same shape and llama.cpp and ggml-cuda reuse their graphs. Defaults to `false` on the CPU, `true` on a GPU.
     */
    lookaheadFill?: boolean;
    /**
     * KV cache element type for keys and values. `q8_0` halves the bytes every step's attention reads (what makes long
     * contexts slower on a GPU) at a small numeric cost; llama.cpp needs flash attention for a quantized V cache.
     * Defaults to `f16` (llama.cpp's default).
     */
    kvType?: KvType;
    /**
     * Flash attention. On the CPU it made batched drafts differ from drafts computed alone (its accumulation order
     * depends on the batch), so it is off there unless forced here. Defaults to `true` on a GPU, `false` on the CPU.
     */
    flashAttention?: boolean;
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
     * CPU threads for llama.cpp. ggml's threads spin while they wait for each other, so on a busy machine every thread
     * beyond the free cores costs far more than it gives (a 2-core machine under load drafted 500× slower with 2 than
     * with 1). Defaults to the number of CPUs − 1, at least 1 and at most 8.
     */
    threads?: number;
}
