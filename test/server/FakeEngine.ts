/**
 * A DraftEngine for testing the HTTP layer without a model. Deterministic: the draft of a context whose last token is
 * `t` is t+1, t+2, … (mod vocabSize), so expected answers can be computed in the test. It checks requests with the
 * real engine's validateDraftRequest, honours `endId`, aborts through the AbortSignal, limits its queue like the real
 * engine, reports to an EngineObserver (prefix reuse = the
 * longest common prefix with any earlier request), and can hold drafts at a gate so tests can act while a draft is in
 * flight without timing.
 */

import { type EngineError, engineError } from "../../src/engine/errors.js";
import type {
    DraftEngine,
    DraftOptions,
    EngineInfo,
    EngineObserver,
    LookaheadSettings,
    StepStats,
} from "../../src/engine/types.js";
import { validateDraftRequest } from "../../src/engine/validateDraftRequest.js";

export interface FakeEngineOptions {
    /** Defaults to `1000`. */
    vocabSize?: number;
    /** Defaults to `256`. */
    contextSize?: number;
    /** Requests in flight at once before queue_full. Defaults to `64`. */
    maxQueue?: number;
    observer?: EngineObserver;
    /** Changes the vocabulary fingerprint, as two different vocabularies would. Defaults to `"fake-vocab"`. */
    vocabName?: string;
    /** What info says of candidates (the fake drafts without steps). Defaults to off. */
    lookahead?: LookaheadSettings;
}

/** What the fake reports of each draft token's step: one token, no time spent, one token drafted. */
const fakeStep: StepStats = {
    tokens: 1,
    sequences: 1,
    decodeMs: 0,
    submitMs: 0,
    waitMs: 0,
    sampleMs: 0,
    hostMs: 0,
    graphReused: false,
    drafted: 1,
    candidates: 0,
    fillers: 0,
    accepted: 0,
};

/** The fake's rule: the draft of `tokens` (without end id). */
export function fakeDraft(tokens: readonly number[], n: number, vocabSize = 1000): number[] {
    const last = tokens.at(-1);
    if (last === undefined) throw new RangeError("fakeDraft: no tokens (validateDraftRequest refuses them)");
    return Array.from({ length: n }, (_, i) => (last + i + 1) % vocabSize);
}

export class FakeEngine implements DraftEngine {
    readonly info: EngineInfo;
    /** Every draft the fake accepted (valid, n > 0), in order. */
    readonly calls: { tokens: number[]; n: number; endId: number | undefined }[] = [];
    /** Drafts that ended because their signal aborted. */
    aborted = 0;
    closed = false;

    private readonly maxQueue: number;
    private readonly observer: EngineObserver;
    private readonly seen: number[][] = [];
    private inFlight = 0;
    private gate: Promise<void> | undefined;
    private openGate: (() => void) | undefined;
    private readonly startWaiters: (() => void)[] = [];
    private readonly abortWaiters: (() => void)[] = [];

    constructor(options: FakeEngineOptions = {}) {
        const vocabSize = options.vocabSize ?? 1000;
        this.info = {
            modelName: "fake",
            architecture: "fake",
            vocabSize,
            vocabFingerprint: `sha256-of-${options.vocabName ?? "fake-vocab"}-${vocabSize}`,
            contextSize: options.contextSize ?? 256,
            streams: 4,
            quantization: "F32",
            fileBytes: 0,
            backend: "cpu",
            engine: "fake",
            flashAttention: false,
            lookahead: options.lookahead ?? { candidates: 0, stepTokens: 1, fill: false },
        };
        this.maxQueue = options.maxQueue ?? 64;
        this.observer = options.observer ?? {};
    }

    /** Holds every draft (new and in flight) until `release()`. */
    hold(): void {
        this.gate ??= new Promise((resolve) => (this.openGate = resolve));
    }

    release(): void {
        this.openGate?.();
        this.gate = undefined;
        this.openGate = undefined;
    }

    /** Resolves when the next draft call has started (or at once if one is in flight). */
    started(): Promise<void> {
        if (this.inFlight > 0) return Promise.resolve();
        return new Promise((resolve) => this.startWaiters.push(resolve));
    }

    /** Resolves when a draft has ended by abort. */
    abortSeen(): Promise<void> {
        if (this.aborted > 0) return Promise.resolve();
        return new Promise((resolve) => this.abortWaiters.push(resolve));
    }

    async draft(tokens: readonly number[], n: number, options: DraftOptions = {}): Promise<number[]> {
        if (this.closed) throw engineError("engine_closed");
        const invalid = validateDraftRequest(this.info, tokens, n, options.endId);
        if (invalid) throw invalid;
        if (n === 0) return [];
        if (this.inFlight >= this.maxQueue)
            throw engineError("queue_full", { waiting: this.inFlight, limit: this.maxQueue });
        this.calls.push({ tokens: [...tokens], n, endId: options.endId });
        this.inFlight++;
        this.observer.onQueueDepth?.(this.inFlight);
        for (const wake of this.startWaiters.splice(0)) wake();
        try {
            await this.waitForGate(options.signal);
            // like llama.cpp, the last context token is always evaluated again to get its logits
            const common = Math.max(0, ...this.seen.map((earlier) => commonPrefix(earlier, tokens)));
            const reused = Math.min(common, tokens.length - 1);
            this.seen.push([...tokens]);
            this.observer.onPrefix?.(tokens.length - reused, reused);
            const draft: number[] = [];
            for (const id of fakeDraft(tokens, n, this.info.vocabSize)) {
                this.observer.onStep?.({ ...fakeStep, sequences: this.inFlight });
                draft.push(id);
                if (id === options.endId) break;
            }
            return draft;
        } finally {
            this.inFlight--;
            this.observer.onQueueDepth?.(this.inFlight);
        }
    }

    async close(): Promise<void> {
        // like the real engine: in-flight drafts finish first
        while (this.inFlight > 0) await new Promise((resolve) => setImmediate(resolve));
        this.closed = true;
    }

    private async waitForGate(signal: AbortSignal | undefined): Promise<void> {
        if (signal?.aborted) throw this.abort();
        const gate = this.gate;
        if (gate === undefined) return;
        await new Promise<void>((resolve, reject) => {
            const onAbort = () => reject(this.abort());
            signal?.addEventListener("abort", onAbort, { once: true });
            gate.then(() => {
                signal?.removeEventListener("abort", onAbort);
                resolve();
            });
        });
    }

    private abort(): EngineError {
        this.aborted++;
        for (const wake of this.abortWaiters.splice(0)) wake();
        return engineError("aborted");
    }
}

function commonPrefix(a: readonly number[], b: readonly number[]): number {
    let i = 0;
    while (i < a.length && i < b.length && a[i] === b[i]) i++;
    return i;
}
