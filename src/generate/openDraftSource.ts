/**
 * Opens one of the three draft sources as a node-llama-cpp TokenPredictor, after checking that its vocabulary is the
 * target's (a server's from its `GET /info`, a GGUF's from its metadata): a specdraft server over HTTP, an in-process
 * draft GGUF, or prompt lookup (no model).
 */
import {
    DraftSequenceTokenPredictor,
    InputLookupTokenPredictor,
    type Llama,
    type TokenPredictor,
} from "node-llama-cpp";
import { withTrailingSlash } from "../client/createDraftClient.js";
import { readModelFileInfo } from "../engine/gguf.js";
import { GenerateError } from "./errors.js";
import { GreedyDraftTokenPredictor } from "./GreedyDraftTokenPredictor.js";
import { defaultDraftTimeoutMs, HttpDraftTokenPredictor } from "./HttpDraftTokenPredictor.js";
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
    /** The drafter's quantization (its GGUF's, or its server's `GET /info`), when known. */
    readonly quantization?: string;
    /** One predictor for the whole session; it is reset before each generation. */
    readonly predictor: TokenPredictor;
    close(): Promise<void>;
}

/** Vocabulary check first (no weights loaded yet for a mismatch), then the predictor. Throws GenerateError on mismatch. */
export async function openDraftSource(spec: DraftSourceSpec, options: DraftSourceOptions): Promise<DraftSource> {
    if (spec.kind === "ngram") {
        const predictor = new InputLookupTokenPredictor({
            patternLength: { min: 1 },
            predictionLength: { min: 1, max: options.draftLength },
        });
        return { kind: "ngram", label: "prompt-lookup", predictor, close: async () => predictor.dispose() };
    }

    if (spec.kind === "http") {
        const timeoutMs = options.timeoutMs ?? defaultDraftTimeoutMs;
        let info: DrafterInfo | undefined;
        try {
            info = await fetchDrafterInfo(spec.url, timeoutMs);
        } catch (error) {
            options.warn(
                `drafter ${spec.url} is not answering (${(error as Error).message}); generating with the target alone`,
            );
        }
        const fingerprint = info?.vocabFingerprint;
        if (fingerprint !== undefined) checkVocabularies(options.target, { label: spec.url, fingerprint });
        const predictor = new HttpDraftTokenPredictor({
            url: spec.url,
            draftLength: options.draftLength,
            vocabSize: options.target.size,
            timeoutMs,
            onFailure: options.warn,
            disabled: fingerprint === undefined,
        });
        return {
            kind: "http",
            label: spec.url,
            vocabFingerprint: fingerprint,
            quantization: info?.quantization,
            predictor,
            close: async () => predictor.dispose(),
        };
    }

    const file = await readModelFileInfo(spec.path);
    checkVocabularies(options.target, { label: spec.path, fingerprint: file.vocabFingerprint });
    const model = await options.llama.loadModel({ modelPath: spec.path });
    try {
        const context = await model.createContext({
            contextSize: options.contextSize,
            sequences: 1,
            threads: options.threads,
        });
        const predictor =
            options.draftModelPredictor === "lock-step"
                ? new GreedyDraftTokenPredictor(context.getSequence(), options.draftLength)
                : new DraftSequenceTokenPredictor(context.getSequence(), {
                      // a full draft every step, as a drafter server gives, and no confidence cut-off: greedy drafts like the others
                      minTokens: options.draftLength,
                      maxTokens: options.draftLength,
                      minConfidence: 0,
                  });
        return {
            kind: "model",
            label: spec.path,
            vocabFingerprint: file.vocabFingerprint,
            quantization: file.quantization,
            predictor,
            close: async () => {
                predictor.dispose();
                await context.dispose();
                await model.dispose();
            },
        };
    } catch (error) {
        await model.dispose();
        throw error;
    }
}

/**
 * Refuses a drafter whose vocabulary is not the target's, since its token ids would stand for other text: throws
 * `vocab_mismatch` naming both sides when the fingerprints differ.
 */
function checkVocabularies(
    target: { label: string; fingerprint: string },
    drafter: { label: string; fingerprint: string },
): void {
    if (target.fingerprint === drafter.fingerprint) return;
    throw new GenerateError(
        "vocab_mismatch",
        `Vocabulary mismatch: the drafter ${drafter.label} has vocabulary fingerprint ${drafter.fingerprint.slice(0, 16)}…, ` +
            `expected the target ${target.label}'s ${target.fingerprint.slice(0, 16)}…. ` +
            "Speculative decoding needs a drafter built on the target's tokenizer.",
    );
}

/** What a server's `GET /info` says about its drafter, as far as the vocabulary check needs. */
interface DrafterInfo {
    model: string;
    vocabSize: number;
    vocabFingerprint: string;
    quantization?: string;
}

/**
 * A specdraft server's model name and vocabulary from its `GET /info`. Throws with a message saying what failed
 * (network, HTTP status, shape).
 */
async function fetchDrafterInfo(baseUrl: string, timeoutMs: number): Promise<DrafterInfo> {
    const url = new URL("info", withTrailingSlash(baseUrl)).href;
    let response: Response;
    try {
        response = await fetch(url, { signal: AbortSignal.timeout(timeoutMs) });
    } catch (error) {
        const cause = (error as { cause?: { code?: string } }).cause;
        throw new Error(`GET ${url}: ${cause?.code ?? (error as Error).message}`);
    }
    const text = await response.text();
    if (!response.ok) throw new Error(`GET ${url}: HTTP ${response.status}: ${text.slice(0, 200)}`);
    let body: unknown;
    try {
        body = JSON.parse(text);
    } catch {
        throw new Error(`GET ${url}: answer is not JSON: ${text.slice(0, 80)}`);
    }
    const info = body as { model?: unknown; vocab_size?: unknown; vocab_fingerprint?: unknown; quantization?: unknown };
    if (typeof info.vocab_fingerprint !== "string" || typeof info.vocab_size !== "number")
        throw new Error(
            `GET ${url}: expected "vocab_fingerprint" (string) and "vocab_size" (number), found ${text.slice(0, 120)}`,
        );
    return {
        model: typeof info.model === "string" ? info.model : "?",
        vocabSize: info.vocab_size,
        vocabFingerprint: info.vocab_fingerprint,
        quantization: typeof info.quantization === "string" ? info.quantization : undefined,
    };
}
