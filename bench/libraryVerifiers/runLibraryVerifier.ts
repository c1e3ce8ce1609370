/**
 * runGenerate's measurement with the target in node-llama-cpp and one of its two verifiers (bench/README.md says what
 * they show): `exact-node-llama-cpp`, specdraft's loop over a node-llama-cpp sequence, and `node-llama-cpp`, the
 * library's own speculative path, which in 3.21.1 accepts at most one draft token per target step. The target alone
 * runs through node-llama-cpp too, and the summary is `specdraft generate`'s, its `verifier` naming the one used.
 */
import type { Llama, LlamaContext, LlamaModel } from "node-llama-cpp";
import { TimedTokenPredictor } from "../../src/generate/generateGreedily.js";
import { generateSpeculatively } from "../../src/generate/generateSpeculatively.js";
import { type GenerationModes, measurePrompts } from "../../src/generate/measurePrompts.js";
import type { NativeTarget } from "../../src/generate/NativeTarget.js";
import type { DraftSource } from "../../src/generate/openDraftSource.js";
import {
    collectWarnings,
    describeSettings,
    describeSources,
    draftSourceOptions,
    type GenerateSetup,
    loadNativeTarget,
    type RunGenerateOptions,
    withGenerateSetup,
} from "../../src/generate/runGenerate.js";
import type { StateOnlyTokenPredictor } from "../../src/generate/StateTokenPredictor.js";
import { summarizeGeneration } from "../../src/generate/summarizeGeneration.js";
import type { GenerateSummary } from "../../src/generate/types.js";
import { generateAlone, generateWithLibraryVerifier, llamaSequenceTarget } from "./nodeLlamaCppGeneration.js";
import {
    type LibraryDraftSourceOptions,
    openLibraryDraftSource,
    openLockStepDraftSource,
} from "./openLibraryDraftSource.js";

/** The verifiers that run the target in node-llama-cpp, in the order `--verifier` lists them. */
export const libraryVerifierKinds = ["exact-node-llama-cpp", "node-llama-cpp"] as const;
/** One of libraryVerifierKinds. */
export type LibraryVerifierKind = (typeof libraryVerifierKinds)[number];

/** runGenerate's options and the verifier. */
export interface RunLibraryVerifierOptions extends RunGenerateOptions {
    verifier: LibraryVerifierKind;
}

/** Throws GenerateError (`vocab_mismatch`, `bad_input`) before generating, as runGenerate does. */
export function runLibraryVerifier(options: RunLibraryVerifierOptions): Promise<GenerateSummary<LibraryVerifierKind>> {
    return withGenerateSetup(options, (setup) => generateThroughLibrary(options, setup));
}

/** The target loaded through node-llama-cpp, the draft source, the verifier's modes, every prompt measured. */
async function generateThroughLibrary(
    options: RunLibraryVerifierOptions,
    setup: GenerateSetup,
): Promise<GenerateSummary<LibraryVerifierKind>> {
    const { llama, settings, contextSize } = setup;
    const warnings = collectWarnings(options.onWarning);
    const sourceOptions = { ...draftSourceOptions(options, setup, warnings.warn), llama };
    const model = await llama.loadModel({ modelPath: options.target });
    const opened: Opened = { contexts: [] };
    try {
        const { modes, source } = await openModes(options, setup, model, sourceOptions, opened);
        const results = await measurePrompts(setup.prompts, modes, settings, options.onProgress);
        return summarizeGeneration(results, {
            ...describeSources(options.target, setup.targetFile, source),
            verifier: options.verifier,
            settings: describeSettings(settings, llamaGpuName(llama), contextSize, source),
            warnings: warnings.list,
        });
    } finally {
        await opened.source?.close();
        opened.replayTarget?.dispose();
        for (const context of opened.contexts) await context.dispose();
        await model.dispose();
    }
}

/** What a run opens besides the target's model, for the caller to close. */
interface Opened {
    source?: DraftSource;
    contexts: LlamaContext[];
    replayTarget?: NativeTarget;
}

/** The verifier's draft source and modes; what they open goes onto `opened` as it opens. */
async function openModes(
    options: RunLibraryVerifierOptions,
    setup: GenerateSetup,
    model: LlamaModel,
    sourceOptions: LibraryDraftSourceOptions,
    opened: Opened,
): Promise<{ modes: GenerationModes; source: DraftSource }> {
    const { settings, contextSize } = setup;
    const [aloneContext, speculative] = await openContexts(model, opened.contexts, contextSize, settings.threads);
    const aloneSequence = aloneContext.getSequence();
    const alone = (tokens: number[]) => generateAlone(aloneSequence, tokens, settings.maxTokens);
    if (options.verifier === "node-llama-cpp") {
        const source = await openLibraryDraftSource(options.draft, sourceOptions);
        opened.source = source;
        return { modes: { alone, ...libraryMode(speculative, source, settings.maxTokens) }, source };
    }
    const source = await openLockStepDraftSource(options.draft, sourceOptions);
    opened.source = source;
    const replayer = async (): Promise<NativeTarget> => {
        opened.replayTarget ??= await loadNativeTarget(options.target, setup);
        return opened.replayTarget;
    };
    return { modes: { alone, ...loopMode(speculative, source, setup, replayer) }, source };
}

/**
 * node-llama-cpp's speculative path: a sequence created with the source's predictor; the library decides its decodes,
 * so nothing is replayed.
 */
function libraryMode(
    context: LlamaContext,
    source: DraftSource,
    maxTokens: number,
): Pick<GenerationModes, "speculate"> {
    const predictor = new TimedTokenPredictor(source.predictor);
    const sequence = context.getSequence({ tokenPredictor: predictor });
    return {
        speculate: async (tokens) => ({
            run: await generateWithLibraryVerifier(sequence, predictor, tokens, maxTokens),
        }),
    };
}

/**
 * specdraft's loop over a node-llama-cpp sequence; node-llama-cpp keeps no logits of greedy steps, so a difference is
 * replayed on `replayer`'s native target (the same context settings, loaded at the first difference).
 */
function loopMode(
    context: LlamaContext,
    source: DraftSource<StateOnlyTokenPredictor>,
    setup: GenerateSetup,
    replayer: () => Promise<NativeTarget>,
): Pick<GenerationModes, "speculate" | "replayer"> {
    const { maxTokens, draftLength } = setup.settings;
    const predictor = new TimedTokenPredictor(source.predictor);
    const target = llamaSequenceTarget(context.getSequence());
    return {
        speculate: (tokens) => generateSpeculatively(target, predictor, tokens, maxTokens, draftLength),
        replayer,
    };
}

/**
 * One context per mode, one sequence each, and never two evaluations at once (node-llama-cpp's sampling of several
 * sequences in one context can race on llama.cpp's logits buffer). The contexts go onto `contexts`, which the caller
 * disposes.
 */
async function openContexts(
    model: LlamaModel,
    contexts: LlamaContext[],
    contextSize: number,
    threads: number,
): Promise<[LlamaContext, LlamaContext]> {
    const alone = await model.createContext({ contextSize, sequences: 1, threads });
    contexts.push(alone);
    const speculative = await model.createContext({ contextSize, sequences: 1, threads });
    contexts.push(speculative);
    return [alone, speculative];
}

/** Where node-llama-cpp's llama.cpp computes, as the summary names it. */
function llamaGpuName(llama: Llama): string {
    return llama.gpu === false ? "cpu" : llama.gpu;
}
