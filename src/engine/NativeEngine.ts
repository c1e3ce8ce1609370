/**
 * The DraftEngine over the native draft loop: a batcher that gathers the requests arriving while a round runs and
 * runs them all as the next round (one batched llama_decode per step, see native/specdraft_engine.cpp), with KV prefix
 * reuse through KvSlotPool.
 *
 * A request's path: draft() validates it and queues it → runRounds() takes up to `streams` queued requests, leases
 * each a KV slot (longest cached prefix) → the native round trims, prefills and drafts them together → each draft
 * resolves, and the pool records what each slot's cache now holds.
 */

import { EngineError } from "./errors.js";
import { KvSlotPool } from "./KvSlotPool.js";
import type { NativeEngineHandle, NativeRoundItem, NativeRoundResult } from "./nativeAddon.js";
import type { DraftEngine, DraftOptions, EngineInfo, EngineObserver } from "./types.js";

/** Requests that may wait for a round before new ones get queue_full. Defaults to `1024`. */
export const defaultMaxQueue = 1024;
/** Longest wait, in ms, for the conversations of recent rounds to come back before a round starts. Defaults to `10`. */
export const defaultGatherMs = 10;
/** The wait is also capped at this share of the last round's duration, so it never costs more than ~10 %. */
const gatherShareOfRound = 0.1;
/** Rounds whose sizes say how many conversations are active. */
const recentRoundsKept = 8;

export interface NativeEngineOptions {
    /** Requests that may wait for a round before new ones get queue_full. Defaults to `1024`. */
    maxQueue?: number;
    /** Receives decode, prefix and queue counters. Defaults to none. */
    observer?: EngineObserver;
    /**
     * Before a round starts with fewer requests than recent rounds had, wait up to this many ms (and at most a tenth of
     * the last round's duration) for the others: clients in a closed loop send their next request just after their
     * draft returns, and a round started with the first arrival alone would split them over two rounds for good.
     * Defaults to `10`.
     */
    gatherMs?: number;
}

interface PendingDraft {
    tokens: readonly number[];
    n: number;
    endId: number;
    signal: AbortSignal | undefined;
    resolve(draft: number[]): void;
    reject(error: Error): void;
    settled: boolean;
    /** Set while the request is in a round: drops it from the round at the next step. */
    cancel: (() => void) | undefined;
    onAbort: (() => void) | undefined;
}

export class NativeEngine implements DraftEngine {
    readonly info: EngineInfo;
    private readonly native: NativeEngineHandle;
    private readonly pool: KvSlotPool;
    private readonly maxQueue: number;
    private readonly observer: EngineObserver;
    private readonly gatherMs: number;
    private readonly recentRoundSizes: number[] = [];
    private lastRoundMs = 0;
    private readonly queue: PendingDraft[] = [];
    private inRound = 0;
    private running: Promise<void> | undefined;
    private scheduled = false;
    private closing = false;
    private closed: Promise<void> | undefined;

    /** Takes a loaded native engine; `info` describes it. */
    constructor(native: NativeEngineHandle, info: EngineInfo, options: NativeEngineOptions = {}) {
        this.native = native;
        this.info = info;
        this.pool = new KvSlotPool(info.streams);
        this.maxQueue = options.maxQueue ?? defaultMaxQueue;
        this.observer = options.observer ?? {};
        this.gatherMs = options.gatherMs ?? defaultGatherMs;
    }

    draft(tokens: readonly number[], n: number, options: DraftOptions = {}): Promise<number[]> {
        if (this.closing) return Promise.reject(new EngineError("engine_closed", "The draft engine is closed."));
        const error = this.validate(tokens, n, options);
        if (error) return Promise.reject(error);
        if (n === 0) return Promise.resolve([]);
        if (this.queue.length >= this.maxQueue) {
            return Promise.reject(
                new EngineError("queue_full", `Draft queue full: ${this.queue.length} requests waiting (limit ${this.maxQueue}).`),
            );
        }
        return new Promise<number[]>((resolve, reject) => {
            const request: PendingDraft = {
                tokens: tokens.slice(),
                n,
                endId: options.endId ?? -1,
                signal: options.signal,
                resolve,
                reject,
                settled: false,
                cancel: undefined,
                onAbort: undefined,
            };
            if (options.signal) {
                request.onAbort = () => this.abort(request);
                options.signal.addEventListener("abort", request.onAbort, { once: true });
            }
            this.queue.push(request);
            this.reportQueueDepth();
            this.schedule();
        });
    }

    /** Finishes queued and in-flight drafts, then frees the model. */
    close(): Promise<void> {
        if (!this.closed) {
            this.closing = true;
            this.closed = (async () => {
                while (this.running || this.scheduled) {
                    await (this.running ?? new Promise<void>((r) => setImmediate(r)));
                }
                this.native.dispose();
            })();
        }
        return this.closed;
    }

    private validate(tokens: readonly number[], n: number, options: DraftOptions): Error | undefined {
        if (options.signal?.aborted) return new EngineError("aborted", "The draft request was aborted.");
        if (!Array.isArray(tokens) || tokens.length === 0) {
            return new EngineError("invalid_token", "Expected at least one token id, got none.");
        }
        const vocabSize = this.info.vocabSize;
        for (let i = 0; i < tokens.length; i++) {
            const id = tokens[i];
            if (!Number.isInteger(id) || id! < 0 || id! >= vocabSize) {
                return new EngineError("invalid_token", `Invalid token id ${id} at index ${i}: expected 0 ≤ id < ${vocabSize}.`);
            }
        }
        if (!Number.isInteger(n) || n < 0) return new RangeError(`Draft length must be an integer ≥ 0, got ${n}.`);
        const endId = options.endId;
        if (endId !== undefined && (!Number.isInteger(endId) || endId < 0 || endId >= vocabSize)) {
            return new EngineError("invalid_token", `Invalid end id ${endId}: expected 0 ≤ id < ${vocabSize}.`);
        }
        if (tokens.length + n > this.info.contextSize) {
            return new EngineError(
                "context_overflow",
                `Prompt of ${tokens.length} tokens plus a draft of ${n} does not fit the context of ${this.info.contextSize} tokens.`,
            );
        }
        return undefined;
    }

    private abort(request: PendingDraft): void {
        if (request.settled) return;
        const index = this.queue.indexOf(request);
        if (index >= 0) this.queue.splice(index, 1);
        request.cancel?.();
        this.settle(request, new EngineError("aborted", "The draft request was aborted."));
        this.reportQueueDepth();
    }

    private settle(request: PendingDraft, result: number[] | Error): void {
        if (request.settled) return;
        request.settled = true;
        if (request.onAbort) request.signal?.removeEventListener("abort", request.onAbort);
        if (result instanceof Error) request.reject(result);
        else request.resolve(result);
    }

    private reportQueueDepth(): void {
        this.observer.onQueueDepth?.(this.queue.length + this.inRound);
    }

    /** Starts rounds on the next turn of the event loop, so requests arriving together share the first round. */
    private schedule(): void {
        if (this.running || this.scheduled) return;
        this.scheduled = true;
        setImmediate(() => {
            this.scheduled = false;
            this.running = this.runRounds();
        });
    }

    /** Runs rounds until the queue is empty; `running` is cleared in the same turn as the last empty-queue check. */
    private async runRounds(): Promise<void> {
        try {
            while (this.queue.length > 0) {
                await this.gather();
                const requests = this.queue.splice(0, Math.min(this.queue.length, this.info.streams));
                if (requests.length === 0) continue;
                this.recentRoundSizes.push(requests.length);
                if (this.recentRoundSizes.length > recentRoundsKept) this.recentRoundSizes.shift();
                const started = performance.now();
                await this.runRound(requests);
                this.lastRoundMs = performance.now() - started;
            }
        } finally {
            this.running = undefined;
        }
    }

    /** Waits (at most gatherMs, and a tenth of the last round) until as many requests wait as recent rounds had. */
    private async gather(): Promise<void> {
        const expected = Math.min(Math.max(0, ...this.recentRoundSizes), this.info.streams);
        const deadline = performance.now() + Math.min(this.gatherMs, gatherShareOfRound * this.lastRoundMs);
        while (this.queue.length > 0 && this.queue.length < expected && !this.closing && performance.now() < deadline) {
            await new Promise<void>((resolve) => setTimeout(resolve, 0.5));
        }
    }

    private async runRound(requests: PendingDraft[]): Promise<void> {
        const items: NativeRoundItem[] = [];
        const cancelFlags = new Uint8Array(requests.length);
        requests.forEach((request, i) => {
            const lease = this.pool.acquire(request.tokens)!;
            items.push({
                slot: lease.slot,
                keep: lease.reuse,
                tokens: Int32Array.from(request.tokens.slice(lease.reuse)),
                n: request.n,
                endId: request.endId,
            });
            request.cancel = () => {
                cancelFlags[i] = 1;
            };
            this.observer.onPrefix?.(request.tokens.length - lease.reuse, lease.reuse);
        });
        this.inRound = requests.length;
        this.reportQueueDepth();

        let result: NativeRoundResult;
        try {
            result = await this.native.round(items, cancelFlags);
        } catch (error) {
            // the slots' caches are in an unknown state: forget them
            for (const item of items) this.pool.release(item.slot, []);
            const reason = error instanceof Error ? error.message : String(error);
            for (const request of requests) this.settle(request, new Error(`Draft engine failure: ${reason}`));
            this.inRound = 0;
            this.reportQueueDepth();
            return;
        }

        for (let i = 0; i < result.decodes.length; i += 2) this.observer.onDecode?.(result.decodes[i]!, result.decodes[i + 1]!);
        requests.forEach((request, i) => {
            const draft = Array.from(result.drafts[i]!);
            const held = request.tokens.concat(draft).slice(0, result.cached[i]!);
            this.pool.release(items[i]!.slot, held);
            request.cancel = undefined;
            this.settle(request, draft);
        });
        this.inRound = 0;
        this.reportQueueDepth();
    }
}
