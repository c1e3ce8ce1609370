/**
 * Opens one of the three draft sources as a node-llama-cpp TokenPredictor, after checking that its vocabulary is the
 * target's (a server's from its `GET /info`, a GGUF's from its metadata): a specdraft server over HTTP, a draft GGUF
 * in specdraft's draft engine in this process, or prompt lookup (no model).
 */
import { InputLookupTokenPredictor, type Token, type TokenPredictor } from "node-llama-cpp";
import { newConversationKey } from "../client/conversationKey.js";
import { createSpecdraftClient } from "../client/createDraftClient.js";
import { fetchServerInfo, type ServerInfo } from "../client/fetchServerInfo.js";
import type { DraftClient } from "../client/types.js";
import { type ModelFileInfo, readModelFileInfo } from "../engine/gguf.js";
import { loadEngine } from "../engine/loadEngine.js";
import type { GpuChoice, LookaheadSettings } from "../engine/types.js";
import { NativeDraftTokenPredictor } from "./NativeDraftTokenPredictor.js";
import { type StateOnlyTokenPredictor, StateTokenPredictor } from "./StateTokenPredictor.js";
import { type DraftSourceKind, GenerateError } from "./types.js";

// A node-llama-cpp TokenPredictor whose drafts come from a specdraft server: each prediction is one
// `POST /draft {"tokens": <everything so far>, "n": k}`; the server reuses its KV cache for the shared prefix. Each
// generation (from one reset() to the next) sends its own conversation key, which keeps it on one replica behind a proxy.
//
// A drafter that fails (unreachable, HTTP error, malformed answer, timeout) must not fail the generation: the first
// failure is reported through `onFailure` and the predictor then offers no drafts, so the target carries on alone.

interface HttpDraftTokenPredictorOptions {
    /** The server's root URL, e.g. `http://127.0.0.1:8000`. */
    url: string;
    /** Draft tokens asked for per request (k). */
    draftLength: number;
    /** The target's vocabulary size: a draft id outside 0 ≤ id < vocabSize counts as a malformed answer. */
    vocabSize: number;
    /** Per-request timeout (runGenerate resolves it: defaultGenerateTimeoutMs). */
    timeoutMs: number;
    /** Called once, on the first failure, with a message naming the server and what went wrong. */
    onFailure?: (message: string) => void;
    /** Start without drafting (e.g. `/info` already failed). Defaults to `false`. */
    disabled?: boolean;
}

class HttpDraftTokenPredictor extends StateTokenPredictor {
    private readonly client: DraftClient;
    private readonly draftLength: number;
    private readonly vocabSize: number;
    private readonly onFailure?: (message: string) => void;
    private conversation = newConversationKey();
    /** Set on the first failure (or from the start, `disabled`): no more drafts are asked for. */
    private failed: boolean;

    constructor(options: HttpDraftTokenPredictorOptions) {
        super();
        this.client = createSpecdraftClient(options.url, {
            name: options.url,
            timeoutMs: options.timeoutMs,
        });
        this.draftLength = options.draftLength;
        this.vocabSize = options.vocabSize;
        this.onFailure = options.onFailure;
        this.failed = options.disabled ?? false;
    }

    override reset(params: { stateTokens: Token[] }): void {
        super.reset(params);
        this.conversation = newConversationKey();
    }

    async predictTokens(): Promise<Token[]> {
        if (this.failed || this.stateTokens.length === 0) return [];
        const outcome = await this.client.draft(this.stateTokens, this.draftLength, this.conversation);
        if (!outcome.ok) return this.fail(`${outcome.failure}: ${outcome.message}`);
        const bad = outcome.draft.findIndex((id) => id >= this.vocabSize);
        if (bad >= 0)
            return this.fail(`malformed: draft[${bad}] = ${outcome.draft[bad]}, expected 0 ≤ id < ${this.vocabSize}`);
        return outcome.draft as Token[];
    }

    private fail(reason: string): Token[] {
        this.failed = true;
        this.onFailure?.(`drafter ${this.client.url} failed (${reason}); generating with the target alone`);
        return [];
    }
}

export type DraftSourceSpec = { kind: "http"; url: string } | { kind: "model"; path: string } | { kind: "ngram" };

/** What every source is opened with (bench/libraryVerifiers adds what node-llama-cpp's draft models need). */
export interface DraftSourceCommon {
    /** Draft tokens the predictor prepares per step. */
    draftLength: number;
    /** The target's vocabulary and a name for it in messages. */
    target: { label: string; fingerprint: string; size: number };
    /** Context size for the draft model (source `model`): at least the target's. */
    contextSize: number;
    /** Where the draft engine computes (source `model`). */
    gpu: GpuChoice;
    /** End-of-generation token ids of the (shared) vocabulary: a native draft ends after one. Defaults to none. */
    eogIds?: ReadonlySet<number>;
    /** Threads for the draft model's context. Defaults to node-llama-cpp's choice. */
    threads?: number;
    /** Per-request timeout for the server (source `http`); runGenerate resolves it (defaultGenerateTimeoutMs). */
    timeoutMs: number;
    /**
     * Prompt-lookup candidates per step of the draft engine (source `model`). Defaults to the engine's for its
     * backend (engineDefaults.ts: defaultLookahead).
     */
    lookahead?: number;
    /** Receives warnings (e.g. the server is unreachable and generation goes on with the target alone). */
    warn: (message: string) => void;
}

/** An open draft source; `P` is its predictor's type (a StateOnlyTokenPredictor from openStateDraftSource). */
export interface DraftSource<P extends TokenPredictor = TokenPredictor> {
    readonly kind: DraftSourceKind;
    /** URL, file path or `prompt-lookup`. */
    readonly label: string;
    /** The drafter's vocabulary fingerprint, when it has one and it was read. */
    readonly vocabFingerprint?: string;
    /** The drafter's quantization (its GGUF's, or its server's `GET /info`), when known. */
    readonly quantization?: string;
    /** One predictor for the whole session; it is reset before each generation. */
    readonly predictor: P;
    /** How the drafter checks prompt-lookup candidates: the in-process draft engine's, or a server's `GET /info`. */
    readonly lookahead?: LookaheadSettings;
    close(): Promise<void>;
}

/**
 * Opens a source whose predictor drafts from the tokens so far alone, with no target sequence (the native target has
 * none to give): a specdraft server, prompt lookup, or a draft model in specdraft's draft engine. The vocabulary check
 * comes first (no weights loaded yet for a mismatch); throws GenerateError on mismatch.
 */
export async function openStateDraftSource(
    spec: DraftSourceSpec,
    options: DraftSourceCommon,
): Promise<DraftSource<StateOnlyTokenPredictor>> {
    if (spec.kind === "ngram") {
        const predictor = new InputLookupTokenPredictor({
            patternLength: { min: 1 },
            predictionLength: { min: 1, max: options.draftLength },
        });
        return { kind: "ngram", label: "prompt-lookup", predictor, close: async () => predictor.dispose() };
    }
    if (spec.kind === "http") return openHttpDraftSource(spec.url, options);

    const file = await readDraftModelFile(spec.path, options.target);
    const engine = await loadEngine({
        modelPath: spec.path,
        modelFile: file,
        streams: 1,
        contextSize: options.contextSize,
        gpu: options.gpu,
        threads: options.threads,
        lookahead: options.lookahead,
    });
    const predictor = new NativeDraftTokenPredictor(engine, options.draftLength, options.eogIds ?? new Set());
    return {
        kind: "model",
        label: spec.path,
        vocabFingerprint: file.vocabFingerprint,
        quantization: file.quantization,
        predictor,
        lookahead: engine.info.lookahead,
        close: async () => {
            predictor.dispose();
            await engine.close();
        },
    };
}

/** A specdraft server: its `GET /info` first (vocabulary; a server that does not answer leaves the target alone). */
async function openHttpDraftSource(
    url: string,
    options: DraftSourceCommon,
): Promise<DraftSource<HttpDraftTokenPredictor>> {
    let info: ServerInfo | undefined;
    try {
        info = await fetchServerInfo(url, options.timeoutMs);
    } catch (error) {
        options.warn(`drafter ${url} is not answering (${(error as Error).message}); generating with the target alone`);
    }
    const fingerprint = info?.vocabFingerprint;
    if (fingerprint !== undefined) checkVocabularies(options.target, { label: url, fingerprint });
    const predictor = new HttpDraftTokenPredictor({
        url,
        draftLength: options.draftLength,
        vocabSize: options.target.size,
        timeoutMs: options.timeoutMs,
        onFailure: options.warn,
        disabled: fingerprint === undefined,
    });
    return {
        kind: "http",
        label: url,
        vocabFingerprint: fingerprint,
        quantization: info?.quantization,
        lookahead: info?.lookahead,
        predictor,
        close: async () => predictor.dispose(),
    };
}

/** The draft GGUF's header, refused when its vocabulary is not the target's (before any weights are loaded). */
export async function readDraftModelFile(path: string, target: DraftSourceCommon["target"]): Promise<ModelFileInfo> {
    const file = await readModelFileInfo(path);
    checkVocabularies(target, { label: path, fingerprint: file.vocabFingerprint });
    return file;
}

/**
 * Refuses a drafter whose vocabulary is not the target's, since its token ids would stand for other text: throws
 * `vocab_mismatch` naming both sides when the fingerprints differ. `specdraft speedup` refuses a pair by it too.
 */
export function checkVocabularies(
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
