/**
 * The whole of `specdraft generate` but the terminal: checks vocabularies, loads the target (and the draft source),
 * and generates every prompt `runs` times with the target alone and with drafts, in the same process, alternating the
 * order so neither mode always runs warm. Returns the side-by-side summary; equality of outputs is checked here.
 */
import type { Llama, LlamaContext, LlamaModel } from "node-llama-cpp";
import { defaultThreads } from "../engine/defaultThreads.js";
import { readModelFileInfo } from "../engine/gguf.js";
import { comparePromptRuns } from "./comparePromptRuns.js";
import { GenerateError } from "./errors.js";
import { generateAlone } from "./generateAlone.js";
import { generateWithExactVerifier } from "./generateWithExactVerifier.js";
import { generateWithLibraryVerifier } from "./generateWithLibraryVerifier.js";
import { type GpuChoice, loadLlama } from "./loadLlama.js";
import { type DraftSource, type DraftSourceSpec, openDraftSource } from "./openDraftSource.js";
import { summarizeGeneration } from "./summarizeGeneration.js";
import { TimedTokenPredictor } from "./TimedTokenPredictor.js";
import type { GenerateSummary, GenerationRun, PromptResult, VerifierKind } from "./types.js";

export const defaultMaxTokens = 256;
export const defaultDraftLength = 16;
export const defaultRuns = 1;
export const defaultGpu: GpuChoice = "auto";
/**
 * `exact`: specdraft's verification loop over node-llama-cpp's public API, fed by the same token predictors. The
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
    /** An already loaded llama.cpp (tests share one); it is not disposed. Defaults to loading one for `gpu`. */
    llama?: Llama;
    /** Receives warnings as they happen (they are also in the summary). */
    onWarning?: (message: string) => void;
    /** Called after each generation with the number done and the total. */
    onProgress?: (done: number, total: number) => void;
}

/** Throws GenerateError (`vocab_mismatch`, `bad_input`) before generating; an output mismatch is in the summary. */
export async function runGenerate(options: RunGenerateOptions): Promise<GenerateSummary> {
    const maxTokens = options.maxTokens ?? defaultMaxTokens;
    const draftLength = options.draftLength ?? defaultDraftLength;
    const runs = options.runs ?? defaultRuns;
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
    try {
        targetModel = await llama.loadModel({ modelPath: options.target });
        const model = targetModel;
        const prompts = options.prompts.map((prompt) => ({
            ...prompt,
            tokens: Array.isArray(prompt.tokens) ? prompt.tokens : model.tokenize(prompt.tokens.text),
        }));
        for (const prompt of prompts) checkPrompt(prompt.id, prompt.tokens, targetFile.vocabSize);
        const contextSize =
            options.contextSize ?? Math.max(...prompts.map((p) => p.tokens.length)) + maxTokens + draftLength + 8;

        source = await openDraftSource(options.draft, {
            draftLength,
            draftModelPredictor: verifier === "exact" ? "lock-step" : "library",
            target: { label: options.target, fingerprint: targetFile.vocabFingerprint, size: targetFile.vocabSize },
            llama,
            contextSize,
            threads,
            timeoutMs: options.timeoutMs,
            warn,
        });
        const predictor = new TimedTokenPredictor(source.predictor);

        // one sequence per context, and never two evaluations at once: node-llama-cpp's sampling of several sequences
        // in one context can race on llama.cpp's logits buffer
        const aloneContext = await model.createContext({ contextSize, sequences: 1, threads });
        contexts.push(aloneContext);
        const speculativeContext = await model.createContext({ contextSize, sequences: 1, threads });
        contexts.push(speculativeContext);
        const aloneSequence = aloneContext.getSequence();
        const speculativeSequence =
            verifier === "node-llama-cpp"
                ? speculativeContext.getSequence({ tokenPredictor: predictor })
                : speculativeContext.getSequence();

        const speculate = (tokens: number[]): Promise<GenerationRun> =>
            verifier === "node-llama-cpp"
                ? generateWithLibraryVerifier(speculativeSequence, predictor, tokens, maxTokens)
                : generateWithExactVerifier(speculativeSequence, predictor, tokens, maxTokens, draftLength);

        const results: PromptResult[] = [];
        const total = prompts.length * runs * 2;
        let done = 0;
        const step = (): void => options.onProgress?.(++done, total);
        for (const prompt of prompts) {
            const alone: GenerationRun[] = [];
            const speculative: GenerationRun[] = [];
            for (let run = 0; run < runs; run++) {
                if (run % 2 === 0) {
                    alone.push(await generateAlone(aloneSequence, prompt.tokens, maxTokens));
                    step();
                    speculative.push(await speculate(prompt.tokens));
                    step();
                } else {
                    speculative.push(await speculate(prompt.tokens));
                    step();
                    alone.push(await generateAlone(aloneSequence, prompt.tokens, maxTokens));
                    step();
                }
            }
            results.push(comparePromptRuns(prompt.id, prompt.category, prompt.tokens.length, alone, speculative));
        }

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
                gpu: llama.gpu === false ? "cpu" : llama.gpu,
                contextSize,
                threads,
            },
            warnings,
        });
    } finally {
        await source?.close();
        for (const context of contexts) await context.dispose();
        await targetModel?.dispose();
        if (options.llama === undefined) await llama.dispose();
    }
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
