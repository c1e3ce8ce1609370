/**
 * Opens one of the three draft sources as a node-llama-cpp TokenPredictor, after checking that its vocabulary is the
 * target's: a specdraft server over HTTP, an in-process draft GGUF, or prompt lookup (no model).
 */
import { DraftSequenceTokenPredictor, InputLookupTokenPredictor, type Llama, type TokenPredictor } from "node-llama-cpp";
import { checkVocabularies } from "./checkVocabularies.js";
import { GreedyDraftTokenPredictor } from "./GreedyDraftTokenPredictor.js";
import { fetchDrafterInfo } from "./fetchDrafterInfo.js";
import { HttpDraftTokenPredictor, defaultDraftTimeoutMs } from "./HttpDraftTokenPredictor.js";
import { readGgufVocabulary } from "./readGgufVocabulary.js";
import type { DraftSourceKind } from "./types.js";

export type DraftSourceSpec = { kind: "http"; url: string } | { kind: "model"; path: string } | { kind: "ngram" };

export interface DraftSourceOptions {
    /** Draft tokens the predictor prepares per step. */
    draftLength: number;
    /** The target's vocabulary and a name for it in messages. */
    target: { label: string; fingerprint: string; size: number };
    /** Loads the draft GGUF (source `model`). */
    llama: Llama;
    /** Context size for the draft model (source `model`): at least the target's. */
    contextSize: number;
    /**
     * Draft model predictor: `library` is node-llama-cpp's DraftSequenceTokenPredictor (background drafting, for the
     * library's verifier); `lock-step` is GreedyDraftTokenPredictor (for the exact verifier). Defaults to `library`.
     */
    draftModelPredictor?: "library" | "lock-step";
    /** Threads for the draft model's context. Defaults to node-llama-cpp's choice. */
    threads?: number;
    /** Per-request timeout for the server (source `http`). Defaults to `5000` ms. */
    timeoutMs?: number;
    /** Receives warnings (e.g. the server is unreachable and generation goes on with the target alone). */
    warn: (message: string) => void;
}

export interface DraftSource {
    readonly kind: DraftSourceKind;
    /** URL, file path or `prompt-lookup`. */
    readonly label: string;
    /** The drafter's vocabulary fingerprint, when it has one and it was read. */
    readonly vocabFingerprint?: string;
    /** One predictor for the whole session; it is reset before each generation. */
    readonly predictor: TokenPredictor;
    close(): Promise<void>;
}

/** Vocabulary check first (no weights loaded yet for a mismatch), then the predictor. Throws GenerateError on mismatch. */
export async function openDraftSource(spec: DraftSourceSpec, options: DraftSourceOptions): Promise<DraftSource> {
    if (spec.kind === "ngram") {
        const predictor = new InputLookupTokenPredictor({ patternLength: { min: 1 }, predictionLength: { min: 1, max: options.draftLength } });
        return { kind: "ngram", label: "prompt-lookup", predictor, close: async () => predictor.dispose() };
    }

    if (spec.kind === "http") {
        const timeoutMs = options.timeoutMs ?? defaultDraftTimeoutMs;
        let fingerprint: string | undefined;
        try {
            fingerprint = (await fetchDrafterInfo(spec.url, timeoutMs)).vocabFingerprint;
        } catch (error) {
            options.warn(`drafter ${spec.url} is not answering (${(error as Error).message}); generating with the target alone`);
        }
        if (fingerprint !== undefined) checkVocabularies(options.target, { label: spec.url, fingerprint });
        const predictor = new HttpDraftTokenPredictor({
            url: spec.url,
            draftLength: options.draftLength,
            vocabSize: options.target.size,
            timeoutMs,
            onFailure: options.warn,
            disabled: fingerprint === undefined
        });
        return { kind: "http", label: spec.url, vocabFingerprint: fingerprint, predictor, close: async () => predictor.dispose() };
    }

    const vocabulary = await readGgufVocabulary(spec.path);
    checkVocabularies(options.target, { label: spec.path, fingerprint: vocabulary.fingerprint });
    const model = await options.llama.loadModel({ modelPath: spec.path });
    try {
        const context = await model.createContext({ contextSize: options.contextSize, sequences: 1, threads: options.threads });
        const predictor =
            options.draftModelPredictor === "lock-step"
                ? new GreedyDraftTokenPredictor(context.getSequence(), options.draftLength)
                : new DraftSequenceTokenPredictor(context.getSequence(), {
                      // a full draft every step, as a drafter server gives, and no confidence cut-off: greedy drafts like the others
                      minTokens: options.draftLength,
                      maxTokens: options.draftLength,
                      minConfidence: 0
                  });
        return {
            kind: "model",
            label: spec.path,
            vocabFingerprint: vocabulary.fingerprint,
            predictor,
            close: async () => {
                predictor.dispose();
                await context.dispose();
                await model.dispose();
            }
        };
    } catch (error) {
        await model.dispose();
        throw error;
    }
}
