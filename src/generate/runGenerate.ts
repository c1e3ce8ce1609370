/**
 * The whole of `specdraft generate` but the terminal: tokenizes and checks the prompts, loads the target in
 * specdraft's native addon and opens the draft source (its vocabulary checked first), and generates every prompt
 * `runs` times with the target alone and with drafts, in the same process (measurePrompts.ts: alternating the order,
 * after `warmup` untimed generations, since the first generations after a load pay one-off costs: CUDA-graph
 * captures, cuBLAS handles, the drafter's first graphs; on the H200 they doubled the first prompt's time). Returns the
 * side-by-side summary; equality of outputs is checked here.
 */
import { getLlama, type Llama, LlamaLogLevel } from "node-llama-cpp";
import { defaultGenerateTimeoutMs } from "../client/createDraftClient.js";
import { defaultThreads } from "../engine/defaultThreads.js";
import { defaultDraftLength, defaultGpu } from "../engine/engineDefaults.js";
import { type ModelFileInfo, readModelFileInfo } from "../engine/gguf.js";
import type { GpuChoice } from "../engine/types.js";
import { generateAloneNative, TimedTokenPredictor } from "./generateGreedily.js";
import { generateSpeculatively } from "./generateSpeculatively.js";
import { type GenerationModes, measurePrompts, type TokenizedPrompt } from "./measurePrompts.js";
import { NativeTarget } from "./NativeTarget.js";
import {
    type DraftSource,
    type DraftSourceCommon,
    type DraftSourceSpec,
    openStateDraftSource,
} from "./openDraftSource.js";
import type { StateOnlyTokenPredictor } from "./StateTokenPredictor.js";
import { summarizeGeneration } from "./summarizeGeneration.js";
import { statsSince } from "./targetStats.js";
import { GenerateError, type GenerateSummary, type NativeTargetStats } from "./types.js";

export const defaultMaxTokens = 256;
export const defaultRuns = 1;
/** Untimed generations of the first prompt per mode before the measured ones. */
export const defaultWarmup = 1;
/** A prompt to generate from: token ids in the target's vocabulary. */
export interface GeneratePrompt {
    id: string;
    category?: string;
    /** Token ids, or text to tokenize with the target's tokenizer. */
    tokens: number[] | { text: string };
}

export interface RunGenerateOptions {
    target: string;
    draft: DraftSourceSpec;
    prompts: GeneratePrompt[];
    /** Tokens generated per prompt (fewer when the target ends the text). Defaults to `256`. */
    maxTokens?: number;
    /** Draft tokens per target step (k). Defaults to `16`. */
    draftLength?: number;
    /** Generations per prompt and mode. Defaults to `1`. */
    runs?: number;
    /** Untimed generations of the first prompt per mode before timing (0: none). Defaults to `1`. */
    warmup?: number;
    /** Defaults to `"auto"`. */
    gpu?: GpuChoice;
    /** CPU threads per llama.cpp context. Defaults to the CPUs less one, 1 to 8 (defaultThreads). */
    threads?: number;
    /** Context size of the target (and draft model). Defaults to the longest prompt + maxTokens + draftLength + 8. */
    contextSize?: number;
    /** Draft server timeout per request. Defaults to `5000` ms. */
    timeoutMs?: number;
    /**
     * Candidates per step of the in-process draft engine (a draft model). Defaults to the
     * engine's for its backend (engineDefaults.ts: defaultLookahead).
     */
    draftLookahead?: number;
    /** An already loaded llama.cpp (tests share one); it is not disposed. Defaults to loading one for `gpu`. */
    llama?: Llama;
    /** Receives warnings as they happen (they are also in the summary). */
    onWarning?: (message: string) => void;
    /** Called after each generation with the number done and the total. */
    onProgress?: (done: number, total: number) => void;
}

/**
 * Loads llama.cpp through node-llama-cpp for the `--gpu` choice. `cpu`: the prebuilt CPU binaries. `vulkan`: a
 * Vulkan build (local or prebuilt; never built from source here). `auto`/`cuda`: the last build made with
 * `node-llama-cpp source build` if any (a machine whose CUDA has no prebuilt binary builds its own that way), else
 * the best prebuilt binary; `cuda` then insists on CUDA. Only llama.cpp errors are logged.
 */
export async function loadLlama(gpu: GpuChoice): Promise<Llama> {
    if (gpu === "cpu") return getLlama({ gpu: false, logLevel: LlamaLogLevel.error });
    if (gpu === "vulkan") return getLlama({ gpu: "vulkan", build: "never", logLevel: LlamaLogLevel.error });
    const llama = await getLlama("lastBuild", { logLevel: LlamaLogLevel.error });
    if (gpu === "cuda" && llama.gpu !== "cuda") {
        const found = llama.gpu === false ? "the CPU" : llama.gpu;
        await llama.dispose();
        throw new Error(
            `--gpu cuda: expected a CUDA build of llama.cpp, found ${found} (build one with \`npx node-llama-cpp source build --gpu cuda\`)`,
        );
    }
    return llama;
}

/** runGenerate's settings with their defaults applied (bench/libraryVerifiers.ts resolves its own the same way). */
export interface GenerateSettings {
    maxTokens: number;
    draftLength: number;
    runs: number;
    warmup: number;
    gpu: GpuChoice;
    threads: number;
}

/** Throws GenerateError (`vocab_mismatch`, `bad_input`) before generating; an output mismatch is in the summary. */
export function runGenerate(options: RunGenerateOptions): Promise<GenerateSummary> {
    return withGenerateSetup(options, (setup) => generateOnNativeTarget(options, setup));
}

/** What every generation starts from: the settings, the target's GGUF header, the prompts and the context size. */
export interface GenerateSetup {
    settings: GenerateSettings;
    targetFile: ModelFileInfo;
    prompts: TokenizedPrompt[];
    contextSize: number;
    /** node-llama-cpp's llama.cpp, for the duration of the call only. */
    llama: Llama;
}

/**
 * Resolves the settings, reads the target's header, loads llama.cpp (unless given) and tokenizes the prompts, then
 * calls `generate`; llama.cpp is disposed after it, if loaded here (bench/libraryVerifiers.ts starts the same way).
 */
export async function withGenerateSetup<T>(
    options: RunGenerateOptions,
    generate: (setup: GenerateSetup) => Promise<T>,
): Promise<T> {
    const settings = resolveGenerateSettings(options);
    const targetFile = await readModelFileInfo(options.target);
    const llama = options.llama ?? (await loadLlama(settings.gpu));
    try {
        const prompts = await tokenizePrompts(llama, options.target, options.prompts, targetFile.vocabSize);
        const contextSize = options.contextSize ?? fittingContextSize(prompts, settings);
        return await generate({ settings, targetFile, prompts, contextSize, llama });
    } finally {
        if (options.llama === undefined) await llama.dispose();
    }
}

/** The options' settings, each defaulted. */
export function resolveGenerateSettings(options: RunGenerateOptions): GenerateSettings {
    return {
        maxTokens: options.maxTokens ?? defaultMaxTokens,
        draftLength: options.draftLength ?? defaultDraftLength,
        runs: options.runs ?? defaultRuns,
        warmup: options.warmup ?? defaultWarmup,
        gpu: options.gpu ?? defaultGpu,
        threads: options.threads ?? defaultThreads(),
    };
}

/**
 * The prompts as token ids: text tokenized with the target's tokenizer (its GGUF loaded vocabulary-only, then let go),
 * every id checked against the target's vocabulary. Throws GenerateError `bad_input`.
 */
export async function tokenizePrompts(
    llama: Llama,
    targetPath: string,
    prompts: readonly GeneratePrompt[],
    vocabSize: number,
): Promise<TokenizedPrompt[]> {
    const model = await llama.loadModel({ modelPath: targetPath, vocabOnly: true });
    try {
        const tokenized = prompts.map((prompt) => ({
            ...prompt,
            tokens: Array.isArray(prompt.tokens) ? prompt.tokens : model.tokenize(prompt.tokens.text),
        }));
        for (const prompt of tokenized) checkPrompt(prompt.id, prompt.tokens, vocabSize);
        return tokenized;
    } finally {
        await model.dispose();
    }
}

/** The context every prompt's generation fits in: the longest prompt, maxTokens, a full draft and a margin. */
export function fittingContextSize(prompts: readonly TokenizedPrompt[], settings: GenerateSettings): number {
    return Math.max(...prompts.map((p) => p.tokens.length)) + settings.maxTokens + settings.draftLength + 8;
}

/**
 * Loads the target in specdraft's addon and the draft source, measures every prompt and summarizes; closes both after.
 * node-llama-cpp has only tokenized.
 */
async function generateOnNativeTarget(options: RunGenerateOptions, setup: GenerateSetup): Promise<GenerateSummary> {
    const { settings, targetFile, contextSize } = setup;
    const warnings = collectWarnings(options.onWarning);
    const target = await loadNativeTarget(options.target, setup);
    try {
        const sourceOptions = draftSourceOptions(options, setup, warnings.warn);
        const source = await openStateDraftSource(options.draft, { ...sourceOptions, eogIds: target.eogIds });
        try {
            const modes = nativeModes(target, new TimedTokenPredictor(source.predictor), settings);
            const results = await measurePrompts(setup.prompts, modes, settings, options.onProgress);
            return summarizeGeneration(results, {
                ...describeSources(options.target, targetFile, source),
                verifier: "exact",
                settings: describeSettings(settings, deviceKind(target), contextSize, source),
                warnings: warnings.list,
            });
        } finally {
            await source.close();
        }
    } finally {
        target.dispose();
    }
}

/** The target in specdraft's addon, sized for the setup: every output of a full draft's step, its threads. */
export function loadNativeTarget(targetPath: string, setup: GenerateSetup): Promise<NativeTarget> {
    const { settings, contextSize } = setup;
    return NativeTarget.load({
        modelPath: targetPath,
        contextSize,
        maxOutputs: settings.draftLength + 1,
        gpu: settings.gpu,
        threads: settings.threads,
    });
}

/** The draft source's options from runGenerate's: the target's vocabulary, the sizes and where it computes. */
export function draftSourceOptions(
    options: RunGenerateOptions,
    setup: GenerateSetup,
    warn: (message: string) => void,
): DraftSourceCommon {
    const { settings, targetFile } = setup;
    return {
        draftLength: settings.draftLength,
        gpu: settings.gpu,
        target: { label: options.target, fingerprint: targetFile.vocabFingerprint, size: targetFile.vocabSize },
        contextSize: setup.contextSize,
        threads: settings.threads,
        timeoutMs: options.timeoutMs ?? defaultGenerateTimeoutMs,
        lookahead: options.draftLookahead,
        warn,
    };
}

/**
 * The target alone and with drafts, both through the same native target, so the speed-up compares like with like;
 * a difference is replayed on it too.
 */
function nativeModes(
    target: NativeTarget,
    predictor: TimedTokenPredictor<StateOnlyTokenPredictor>,
    settings: GenerateSettings,
): GenerationModes {
    const { maxTokens, draftLength } = settings;
    // each generation records the target's calls it made (decodes, submit / wait / read), as speedup's probe does
    const recorded = async <R>(generation: () => Promise<R>, record: (result: R, target: NativeTargetStats) => R) => {
        const before = { ...target.stats };
        const result = await generation();
        return record(result, statsSince(target.stats, before));
    };
    return {
        alone: (tokens) =>
            recorded(
                () => generateAloneNative(target, tokens, maxTokens),
                (run, stats) => ({ ...run, target: stats }),
            ),
        speculate: (tokens) =>
            recorded(
                () => generateSpeculatively(target, predictor, tokens, maxTokens, draftLength),
                (result, stats) => ({ ...result, run: { ...result.run, target: stats } }),
            ),
        replayer: async () => target,
    };
}

/** A list the warnings go onto, and `warn`, which also hands each to `onWarning` as it happens. */
export function collectWarnings(onWarning: ((message: string) => void) | undefined): {
    list: string[];
    warn: (message: string) => void;
} {
    const list: string[] = [];
    return {
        list,
        warn: (message) => {
            list.push(message);
            onWarning?.(message);
        },
    };
}

/** The summary's `target` and `draft`: paths, vocabulary fingerprints and quantizations. */
export function describeSources(
    targetPath: string,
    targetFile: ModelFileInfo,
    source: DraftSource,
): Pick<GenerateSummary, "target" | "draft"> {
    return {
        target: {
            path: targetPath,
            vocabFingerprint: targetFile.vocabFingerprint,
            quantization: targetFile.quantization,
        },
        draft: {
            kind: source.kind,
            source: source.label,
            vocabFingerprint: source.vocabFingerprint,
            quantization: source.quantization,
        },
    };
}

/** The summary's `settings`: `gpu` is where the target computed (`cpu`, `cuda`, `vulkan`, …). */
export function describeSettings(
    settings: GenerateSettings,
    gpu: string,
    contextSize: number,
    source: DraftSource,
): GenerateSummary["settings"] {
    const { maxTokens, draftLength, runs, warmup, threads } = settings;
    return {
        maxTokens,
        draftLength,
        runs,
        warmup,
        gpu,
        contextSize,
        threads,
        ...(source.lookahead ? { draftLookahead: loneRequestCandidates(source.lookahead) } : {}),
    };
}

/** The native target's device as the summary names it: its backend's name in lower case (`cpu` without one). */
function deviceKind(target: NativeTarget): string {
    return (target.gpuDevice.split(":")[0] ?? "").toLowerCase() || "cpu";
}

/** The candidates a lone request's drafter steps check: the step's budget may allow fewer than the setting. */
function loneRequestCandidates(lookahead: { candidates: number; stepTokens: number }): number {
    return Math.min(lookahead.candidates, Math.max(0, lookahead.stepTokens - 1));
}

function checkPrompt(id: string, tokens: readonly number[], vocabSize: number): void {
    if (tokens.length === 0)
        throw new GenerateError("bad_input", `prompt ${JSON.stringify(id)}: expected at least one token, found none`);
    const bad = tokens.findIndex((token) => !Number.isSafeInteger(token) || token < 0 || token >= vocabSize);
    if (bad >= 0)
        throw new GenerateError(
            "bad_input",
            `prompt ${JSON.stringify(id)}: token ${bad} is ${tokens[bad]}, expected 0 ≤ id < ${vocabSize} (the target's vocabulary)`,
        );
}
