/**
 * Types of `specdraft generate`: a target model generating greedily, once alone and once with drafts, side by side,
 * and the error it raises before generating.
 *
 * A prompt's path: prompt tokens → generateAloneNative (the target by itself) and generateSpeculatively (the target
 * verifying drafts from a DraftSource's TokenPredictor) → GenerationRun each → compared token by token
 * (summarizeGeneration.ts), a difference replayed (replayDifference.ts) → GenerateSummary.
 */

/** Where drafts come from. */
export type DraftSourceKind = "http" | "model" | "ngram";

/** Totals over a native target's calls (src/generate/nativeTargetAddon.ts's nativeTargetStatFields). */
export interface NativeTargetStats {
    /** llama_decode calls. */
    decodes: number;
    tokens: number;
    /** ms submitting work, waiting for the device, reading the outputs back. */
    submitMs: number;
    waitMs: number;
    readMs: number;
    /** Decodes that reused the last compute graph. */
    graphsReused: number;
}

/** One greedy generation of one prompt. */
export interface GenerationRun {
    /** Generated token ids (the prompt excluded; an end-of-generation token ends it and is not included). */
    tokens: number[];
    /** Wall time from the first evaluation (prompt included) to the last token, in seconds. */
    seconds: number;
    /**
     * Target decodes that produced tokens (prompt decode included; a decode whose only token ends the output is not
     * counted, as the target alone counts none for its end token); equals `tokens.length` for the target alone.
     */
    targetSteps: number;
    /** Draft tokens offered to the target. */
    drafted: number;
    /** Draft tokens the target accepted and used. */
    accepted: number;
    /** Seconds the generation waited for drafts (TokenPredictor.predictTokens). */
    draftSeconds: number;
    /**
     * The native target's calls during this generation, where the target is specdraft's native one: the same split
     * `specdraft speedup` records for its verify probe (verifySplitByM), so the two compare call for call.
     */
    target?: NativeTargetStats;
}

/**
 * One call of the target: its KV cache trimmed to its first `keep` tokens, `tokens` decoded after them (in llama_decode
 * calls of up to the batch size), and the greedy next token (or the logits) asked after each of tokens[outputFrom ..
 * outputTo). A speculative run records its calls so that the near-tie check can decode them again.
 */
export interface TargetCall {
    keep: number;
    tokens: readonly number[];
    outputFrom: number;
    /** Defaults to `tokens.length`. */
    outputTo?: number;
}

/** Both modes on one prompt, `runs` times each. */
export interface PromptResult {
    id: string;
    category?: string;
    promptLength: number;
    alone: GenerationRun[];
    speculative: GenerationRun[];
    /** True when every speculative run produced exactly the target-alone tokens. */
    identical: boolean;
    /** First position where a speculative run differs from the target alone; absent when identical. */
    firstDifference?: {
        run: number;
        position: number;
        expected: number | null;
        actual: number | null;
        // The near-tie check (src/generate/replayDifference.ts, docs/generate.md): both runs'
        // calls decoded again up to this position, in the shapes they were decoded in.
        /**
         * logit[expected] − logit[actual] as the target alone computed them (an end-of-generation token stands for
         * the end of an output: the one its replay chose).
         */
        logitGap?: number;
        /** logit[actual] − logit[expected] as the speculative run computed them. */
        speculativeLogitGap?: number;
        /** The largest difference over the vocabulary between the two runs' logits there. */
        kernelDisagreement?: number;
        /** The greedy tokens of the two replays there. */
        replayedTokens?: { alone: number; speculative: number };
        /** The first context position where the speculative run's cache held another token than the target alone's. */
        otherContext?: { position: number; expected: number; found: number };
        /**
         * The replays reproduce both runs' tokens from the same context: the decode shapes, not speculation, chose
         * between two tokens within the runs' disagreement. Absent where nothing was replayed
         * (bench/libraryVerifiers.ts's `node-llama-cpp` verifier).
         */
        nearTie?: boolean;
    };
}

/** Totals over all prompts and runs of one mode. */
export interface ModeTotals {
    tokens: number;
    seconds: number;
    tokensPerSecond: number;
    targetSteps: number;
    drafted: number;
    accepted: number;
    draftSeconds: number;
    /** The native target's calls over every run (absent unless every run recorded them). */
    target?: NativeTargetStats;
}

/**
 * What `specdraft generate` reports and writes with `--out`. `Verifier` names the loop that verified drafts:
 * `specdraft generate` has one, `exact`; bench/libraryVerifiers.ts writes the same summary for node-llama-cpp's loops.
 */
export interface GenerateSummary<Verifier extends string = "exact"> {
    /** `quantization`: the GGUF's, by the rule `GET /info` and architecture.json use (src/engine/gguf.ts). */
    target: { path: string; vocabFingerprint: string; quantization: string };
    /** `quantization`: the drafter GGUF's, or what its server's `GET /info` says; absent for prompt lookup. */
    draft: { kind: DraftSourceKind; source: string; vocabFingerprint?: string; quantization?: string };
    /** The loop that verified drafts: `exact`, specdraft's (generateSpeculatively.ts over NativeTarget). */
    verifier: Verifier;
    settings: {
        maxTokens: number;
        draftLength: number;
        runs: number;
        /** Untimed warm-up generations of the first prompt per mode (absent in summaries from before it existed). */
        warmup?: number;
        gpu: string;
        contextSize: number;
        threads?: number;
        /**
         * Prompt-lookup candidates each step of a lone request checked: the in-process draft engine's, or the server's
         * from its `GET /info` (absent for prompt lookup, servers without candidates and older summaries).
         */
        draftLookahead?: number;
    };
    prompts: PromptResult[];
    alone: ModeTotals;
    speculative: ModeTotals;
    /** speculative tokens/s ÷ target-alone tokens/s. */
    speedUp: number;
    /** Mean acceptance length: generated tokens ÷ target steps on the speculative path (accepted + 1 per step). */
    tau: number;
    /** Share of the speculative wall time spent waiting for drafts. */
    draftTimeShare: number;
    /** All speculative outputs equal the target-alone outputs. */
    identical: boolean;
    /** Prompts whose outputs part at a near tie (firstDifference.nearTie). */
    nearTies: number;
    /** Warnings raised while generating (e.g. the drafter failed and generation fell back to the target alone). */
    warnings: string[];
    /** ISO time the run finished. */
    finishedAt: string;
}

// Errors of `specdraft generate`, each with a stable code; the command prints the message and exits ≠ 0.

export type GenerateErrorCode =
    /** The drafter's vocabulary differs from the target's, so its token ids would mean other text. */
    | "vocab_mismatch"
    /** Speculative output differs from the target alone: speculation was not lossless. */
    | "output_mismatch"
    /** A prompt, data file or option cannot be used. */
    | "bad_input";

export class GenerateError extends Error {
    readonly code: GenerateErrorCode;

    constructor(code: GenerateErrorCode, message: string) {
        super(message);
        this.name = "GenerateError";
        this.code = code;
    }
}
