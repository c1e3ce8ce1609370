/**
 * The whole of `specdraft generate` but the terminal: checks vocabularies, loads the target (and the draft source),
 * and generates every prompt `runs` times with the target alone and with drafts, in the same process, alternating the
 * order so neither mode always runs warm, after `warmup` untimed generations of the first prompt in each mode (the
 * first generations after a load pay one-off costs: CUDA-graph captures, cuBLAS handles, the drafter's first graphs;
 * on the H200 they doubled the first prompt's time). Returns the side-by-side summary; equality of outputs is checked
 * here.
 */
import { getLlama, type Llama, type LlamaContext, LlamaLogLevel, type LlamaModel } from "node-llama-cpp";
import { defaultGenerateTimeoutMs } from "../client/createDraftClient.js";
import { defaultThreads } from "../engine/defaultThreads.js";
import { defaultDraftLength, defaultGpu } from "../engine/engineDefaults.js";
import { readModelFileInfo } from "../engine/gguf.js";
import type { GpuChoice } from "../engine/types.js";
import {
    generateAlone,
    generateAloneNative,
    generateWithLibraryVerifier,
    llamaSequenceTarget,
    TimedTokenPredictor,
} from "./generateGreedily.js";
import { generateSpeculatively, type SpeculativeRun } from "./generateSpeculatively.js";
import { NativeTarget } from "./NativeTarget.js";
import {
    type DraftSource,
    type DraftSourceCommon,
    type DraftSourceSpec,
    openDraftSource,
    openStateDraftSource,
} from "./openDraftSource.js";
import { type LogitsReplayer, replayDifference } from "./replayDifference.js";
import type { StateOnlyTokenPredictor } from "./StateTokenPredictor.js";
import { comparePromptRuns, summarizeGeneration } from "./summarizeGeneration.js";
import {
    GenerateError,
    type GenerateSummary,
    type GenerationRun,
    type PromptResult,
    type TargetCall,
    type VerifierKind,
} from "./types.js";

export const defaultMaxTokens = 256;
export const defaultRuns = 1;
/** Untimed generations of the first prompt per mode before the measured ones. */
export const defaultWarmup = 1;
/**
 * `exact`: specdraft's verification loop with the target in specdraft's native addon (one decode per step, greedy tokens
 * from llama.cpp's graph). `exact-node-llama-cpp` is the same loop over node-llama-cpp's `controlledEvaluate`. The
 * library's own speculative path (`node-llama-cpp`) counts every draft token after the first as refuted in 3.21.1, so
 * it can never accept more than one draft token per target step (τ ≤ 2, docs/generate.md). Defaults to `exact`.
 */
export const defaultVerifier: VerifierKind = "exact";

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
    /** Defaults to `"exact"` (defaultVerifier). */
    verifier?: VerifierKind;
    /** CPU threads per llama.cpp context. Defaults to the CPUs less one, 1 to 8 (defaultThreads). */
    threads?: number;
    /** Context size of the target (and draft model). Defaults to the longest prompt + maxTokens + draftLength + 8. */
    contextSize?: number;
    /** Draft server timeout per request. Defaults to `5000` ms. */
    timeoutMs?: number;
    /**
     * Candidates per step of the in-process draft engine (a draft model with the exact verifier). Defaults to the
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

/** Throws GenerateError (`vocab_mismatch`, `bad_input`) before generating; an output mismatch is in the summary. */
export async function runGenerate(options: RunGenerateOptions): Promise<GenerateSummary> {
    const maxTokens = options.maxTokens ?? defaultMaxTokens;
    const draftLength = options.draftLength ?? defaultDraftLength;
    const runs = options.runs ?? defaultRuns;
    const warmup = options.warmup ?? defaultWarmup;
    const gpu = options.gpu ?? defaultGpu;
    const verifier = options.verifier ?? defaultVerifier;
    const threads = options.threads ?? defaultThreads();
    const warnings: string[] = [];
    const warn = (message: string): void => {
        warnings.push(message);
        options.onWarning?.(message);
    };

    const targetFile = await readModelFileInfo(options.target);
    const llama = options.llama ?? (await loadLlama(gpu));
    let targetModel: LlamaModel | undefined;
    const contexts: LlamaContext[] = [];
    let source: DraftSource | undefined;
    let nativeTarget: NativeTarget | undefined;
    // the near-tie check's replays of an exact-node-llama-cpp run: a native target loaded at its first difference
    let replayTarget: NativeTarget | undefined;
    // the native verifier runs the target in specdraft's addon; node-llama-cpp then only tokenizes
    const native = verifier === "exact";
    try {
        targetModel = await llama.loadModel({ modelPath: options.target, vocabOnly: native });
        const model = targetModel;
        const prompts = options.prompts.map((prompt) => ({
            ...prompt,
            tokens: Array.isArray(prompt.tokens) ? prompt.tokens : model.tokenize(prompt.tokens.text),
        }));
        for (const prompt of prompts) checkPrompt(prompt.id, prompt.tokens, targetFile.vocabSize);
        const contextSize =
            options.contextSize ?? Math.max(...prompts.map((p) => p.tokens.length)) + maxTokens + draftLength + 8;

        const targetOptions = { modelPath: options.target, contextSize, maxOutputs: draftLength + 1, gpu, threads };
        if (native) nativeTarget = await NativeTarget.load(targetOptions);
        const sourceOptions: DraftSourceCommon = {
            draftLength,
            gpu,
            eogIds: nativeTarget?.eogIds,
            target: { label: options.target, fingerprint: targetFile.vocabFingerprint, size: targetFile.vocabSize },
            llama,
            contextSize,
            threads,
            timeoutMs: options.timeoutMs ?? defaultGenerateTimeoutMs,
            lookahead: options.draftLookahead,
            warn,
        };
        let modes: GenerationModes;
        if (verifier === "node-llama-cpp") {
            source = await openDraftSource(options.draft, { ...sourceOptions, draftModelPredictor: "library" });
            const predictor = new TimedTokenPredictor(source.predictor);
            modes = await openLibraryModes(model, predictor, contexts, { contextSize, threads, maxTokens });
        } else {
            // the exact verifiers' loop has no sequence to give a predictor: their sources draft from the tokens alone
            const stateSource = await openStateDraftSource(options.draft, {
                ...sourceOptions,
                draftModelPredictor: native ? "native" : "lock-step",
            });
            source = stateSource;
            const predictor = new TimedTokenPredictor(stateSource.predictor);
            if (nativeTarget !== undefined) {
                // alone and speculative through the same native target, so the speed-up compares like with like
                const target = nativeTarget;
                modes = {
                    alone: (tokens) => generateAloneNative(target, tokens, maxTokens),
                    speculate: (tokens) => generateSpeculatively(target, predictor, tokens, maxTokens, draftLength),
                    replayer: async () => target,
                };
            } else {
                const settings = { contextSize, threads, maxTokens, draftLength };
                modes = {
                    ...(await openLlamaExactModes(model, predictor, contexts, settings)),
                    // node-llama-cpp keeps no logits of greedy steps: the replays run on a native target with the
                    // same context settings, loaded at the first difference
                    replayer: async () => {
                        replayTarget ??= await NativeTarget.load(targetOptions);
                        return replayTarget;
                    },
                };
            }
        }

        const results = await measurePrompts(prompts, modes, { runs, warmup }, options.onProgress);

        return summarizeGeneration(results, {
            target: {
                path: options.target,
                vocabFingerprint: targetFile.vocabFingerprint,
                quantization: targetFile.quantization,
            },
            draft: {
                kind: source.kind,
                source: source.label,
                vocabFingerprint: source.vocabFingerprint,
                quantization: source.quantization,
            },
            verifier,
            settings: {
                maxTokens,
                draftLength,
                runs,
                warmup,
                gpu: nativeTarget
                    ? (nativeTarget.gpuDevice.split(":")[0] ?? "").toLowerCase() || "cpu"
                    : llama.gpu === false
                      ? "cpu"
                      : llama.gpu,
                contextSize,
                threads,
                ...(source.lookahead ? { draftLookahead: loneRequestCandidates(source.lookahead) } : {}),
            },
            warnings,
        });
    } finally {
        await source?.close();
        nativeTarget?.dispose();
        replayTarget?.dispose();
        for (const context of contexts) await context.dispose();
        await targetModel?.dispose();
        if (options.llama === undefined) await llama.dispose();
    }
}

/**
 * The two ways one prompt is generated: the target alone and with drafts; a speculative run by specdraft's loop also
 * gives its target calls, which `replayer`'s target decodes again where the outputs part (absent: no replay).
 */
interface GenerationModes {
    alone: (tokens: number[]) => Promise<GenerationRun>;
    speculate: (tokens: number[]) => Promise<SpeculativeRun | { run: GenerationRun; calls?: undefined }>;
    replayer?: () => Promise<LogitsReplayer>;
}

/**
 * One context per mode, one sequence each, and never two evaluations at once (node-llama-cpp's sampling of several
 * sequences in one context can race on llama.cpp's logits buffer). The contexts go onto `contexts`, which the caller
 * disposes.
 */
async function openContexts(
    model: LlamaModel,
    contexts: LlamaContext[],
    settings: { contextSize: number; threads: number },
): Promise<[LlamaContext, LlamaContext]> {
    const { contextSize, threads } = settings;
    const alone = await model.createContext({ contextSize, sequences: 1, threads });
    contexts.push(alone);
    const speculative = await model.createContext({ contextSize, sequences: 1, threads });
    contexts.push(speculative);
    return [alone, speculative];
}

/** The target alone and specdraft's loop over a node-llama-cpp sequence (exact-node-llama-cpp). */
async function openLlamaExactModes(
    model: LlamaModel,
    predictor: TimedTokenPredictor<StateOnlyTokenPredictor>,
    contexts: LlamaContext[],
    settings: { contextSize: number; threads: number; maxTokens: number; draftLength: number },
): Promise<GenerationModes> {
    const { maxTokens, draftLength } = settings;
    const [aloneContext, speculativeContext] = await openContexts(model, contexts, settings);
    const aloneSequence = aloneContext.getSequence();
    const target = llamaSequenceTarget(speculativeContext.getSequence());
    return {
        alone: (tokens) => generateAlone(aloneSequence, tokens, maxTokens),
        speculate: (tokens) => generateSpeculatively(target, predictor, tokens, maxTokens, draftLength),
    };
}

/** The target alone and node-llama-cpp's own speculative path (a sequence created with the token predictor). */
async function openLibraryModes(
    model: LlamaModel,
    predictor: TimedTokenPredictor,
    contexts: LlamaContext[],
    settings: { contextSize: number; threads: number; maxTokens: number },
): Promise<GenerationModes> {
    const { maxTokens } = settings;
    const [aloneContext, speculativeContext] = await openContexts(model, contexts, settings);
    const aloneSequence = aloneContext.getSequence();
    const speculativeSequence = speculativeContext.getSequence({ tokenPredictor: predictor });
    return {
        alone: (tokens) => generateAlone(aloneSequence, tokens, maxTokens),
        speculate: async (tokens) => ({
            run: await generateWithLibraryVerifier(speculativeSequence, predictor, tokens, maxTokens),
        }),
    };
}

/**
 * Generates every prompt `runs` times with the target alone and with drafts, after `warmup` untimed generations of the
 * first prompt in each mode, alternating the order so neither mode always runs warm; where a speculative run parts
 * from the target alone, replays both there (replayDifference.ts) when the modes can.
 */
async function measurePrompts(
    prompts: readonly { id: string; category?: string; tokens: number[] }[],
    modes: GenerationModes,
    counts: { runs: number; warmup: number },
    onProgress: ((done: number, total: number) => void) | undefined,
): Promise<PromptResult[]> {
    const first = prompts[0];
    for (let w = 0; w < counts.warmup && first !== undefined; w++) {
        await modes.alone(first.tokens);
        await modes.speculate(first.tokens);
    }

    const results: PromptResult[] = [];
    const total = prompts.length * counts.runs * 2;
    let done = 0;
    const step = (): void => onProgress?.(++done, total);
    for (const prompt of prompts) {
        const alone: GenerationRun[] = [];
        const speculative: GenerationRun[] = [];
        const calls: (TargetCall[] | undefined)[] = [];
        const speculate = async (): Promise<void> => {
            const generated = await modes.speculate(prompt.tokens);
            speculative.push(generated.run);
            calls.push(generated.calls);
            step();
        };
        for (let run = 0; run < counts.runs; run++) {
            if (run % 2 === 0) {
                alone.push(await modes.alone(prompt.tokens));
                step();
                await speculate();
            } else {
                await speculate();
                alone.push(await modes.alone(prompt.tokens));
                step();
            }
        }
        const result = comparePromptRuns(prompt.id, prompt.category, prompt.tokens.length, alone, speculative);
        const d = result.firstDifference;
        const runCalls = d === undefined ? undefined : calls[d.run];
        if (d !== undefined && runCalls !== undefined && modes.replayer !== undefined) {
            const replay = await replayDifference(
                await modes.replayer(),
                prompt.tokens,
                alone[d.run]?.tokens ?? [],
                runCalls,
                d,
            );
            Object.assign(d, replay);
        }
        results.push(result);
    }
    return results;
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
