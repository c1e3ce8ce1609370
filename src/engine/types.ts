/**
 * The contract between the HTTP layer and the draft engine.
 *
 * A request's path: HTTP route (src/server) → DraftEngine.draft(), which checks it against the model
 * (validateDraftRequest.ts) and queues it → NativeEngine hands it to the native draft loop, whose every llama_decode
 * step carries all requests in flight over one llama.cpp context with many sequences → the draft back.
 */

/** Where llama.cpp computes. */
export type ComputeBackend = "cpu" | "cuda" | "vulkan" | "metal";

/**
 * Where the user asks llama.cpp to compute (`--gpu`, for serve and generate alike); `auto` picks CUDA when its build
 * and an NVIDIA driver are present, else the CPU.
 */
export type GpuChoice = "auto" | "cuda" | "vulkan" | "cpu";

/** A KV cache element type llama.cpp takes for both K and V here (engineDefaults.ts: kvTypes lists them). */
export type KvType = "f16" | "q8_0" | "bf16" | "f32";

/** What `GET /info` reports about the loaded drafter. */
export interface EngineInfo {
    /** `general.name` from the GGUF, or the file name. */
    modelName: string;
    /** `general.architecture`, e.g. `qwen3`. */
    architecture: string;
    /** Number of token ids the model accepts (0 ≤ id < vocabSize). */
    vocabSize: number;
    /** sha256 (hex) over the vocabulary; see gguf.ts. Equal fingerprints mean the same token ids. */
    vocabFingerprint: string;
    /** Tokens a single sequence can hold (prompt + draft). */
    contextSize: number;
    /** Sequences held at once (concurrent conversations with their own KV cache). */
    streams: number;
    /** Weight format, e.g. `Q4_0`, `Q8_0`, `F16`, `F32` (gguf.ts: ggufQuantization). */
    quantization: string;
    /** Model file size in bytes. */
    fileBytes: number;
    backend: ComputeBackend;
    /** Which engine implementation serves drafts: `native` (src/engine/native's draft loop; test doubles name theirs). */
    engine: string;
    flashAttention: boolean;
    /** Candidates by prompt lookup checked in each drafter step (see LookaheadSettings). */
    lookahead: LookaheadSettings;
}

/**
 * Flash attention in a llama.cpp context, the native addon's option for the draft engine and generate's target alike:
 * llama.cpp's three choices (`auto`: llama.cpp enables it where the backend supports it).
 */
export type FlashAttention = "auto" | "on" | "off";

/**
 * How the draft loop checks prompt-lookup guesses: each drafting sequence's step decodes up to `candidates` guesses of
 * its next tokens (from the request's own tokens) with its own token, and keeps those equal to the drafter's greedy
 * choice. A step of S sequences gives each min(candidates, ⌊stepTokens / S⌋ − 1); `fill` decodes that many positions
 * always (fillers where the lookup has fewer), so every step has the same shape.
 */
export interface LookaheadSettings {
    /** Guesses per sequence and step at most; 0: off. */
    candidates: number;
    /** The step's token budget across its sequences. */
    stepTokens: number;
    fill: boolean;
}

export interface DraftOptions {
    /** Stop the draft right after this token (TensorRT-LLM `end_id`); it is included in the draft. */
    endId?: number;
    /** Aborting frees the request's work: it leaves the batch at the next step. */
    signal?: AbortSignal;
}

/**
 * One decode step of the native loop: its size, where its time went (ms) and what it drafted. `decodeMs` is
 * llama_decode and the wait for its result (the device's work), split into the llama_decode call (`submitMs`: on a GPU
 * the host's part — graph reuse or rebuild, inputs, launches — while the device may already run) and the wait for the
 * device after it (`waitMs`).
 */
export interface StepStats {
    /** Tokens in the step's llama_decode batch. */
    tokens: number;
    /** Sequences in that batch. */
    sequences: number;
    /** ms in llama_decode and llama_synchronize: `submitMs` + `waitMs`. */
    decodeMs: number;
    /** ms in the llama_decode call. */
    submitMs: number;
    /** ms in llama_synchronize after it. */
    waitMs: number;
    /** ms fetching outputs and taking the argmax. */
    sampleMs: number;
    /**
     * ms since the previous step ended: batch building, and JS round trips while requests were in flight (idle time is
     * not counted).
     */
    hostMs: number;
    /**
     * llama.cpp reused its compute graph instead of rebuilding it (needs the same batch shape and, with per-sequence KV,
     * the same sequences; ggml-cuda replays a CUDA graph only then).
     */
    graphReused: boolean;
    /** Draft tokens the step produced (over all its sequences). */
    drafted: number;
    /** Candidate positions it decoded after the sequences' frontier tokens (lookahead; fillers included). */
    candidates: number;
    /** Of those, fillers (positions decoded to keep the step's shape where the lookup had no guess). */
    fillers: number;
    /** Candidates kept: each equal to the drafter's own greedy token there. */
    accepted: number;
}

/** Counters the engine reports so the server can export them as metrics. */
export interface EngineObserver {
    /** One decode step (one llama_decode call across all sequences in flight). */
    onStep?(step: StepStats): void;
    /** A request's prefix handling: tokens it had to evaluate and tokens reused from the KV cache. */
    onPrefix?(evaluated: number, reused: number): void;
    /** Requests waiting for or in a batch. */
    onQueueDepth?(depth: number): void;
}

export interface DraftEngine {
    readonly info: EngineInfo;
    /**
     * The greedy continuation of `tokens`: `n` tokens (fewer only when `endId` is produced; none for n = 0, after the
     * checks). Rejects with an EngineError for input the engine cannot take (validateDraftRequest.ts, errors.ts).
     */
    draft(tokens: readonly number[], n: number, options?: DraftOptions): Promise<number[]>;
    /** Finishes in-flight drafts, then frees the model. */
    close(): Promise<void>;
}
