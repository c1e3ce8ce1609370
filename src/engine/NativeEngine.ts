/**
 * The DraftEngine over the native draft loop: continuous batching with KV prefix reuse. Every llama_decode step
 * carries one token for each request still drafting plus the new tokens of requests that just arrived (see
 * native/draft_engine.h), so requests join and leave at any step instead of waiting for others to finish.
 * One native run does steps back to back until nothing is in flight: new requests and aborts are handed to the run
 * in flight (native `submit`, taken before its next step), finished drafts come back mid-run, so the steps never wait
 * for the JS thread.
 *
 * A request's path: draft() validates it and queues it → as soon as a stream is free it is leased a KV slot (longest
 * cached prefix, KvSlotPool) and handed to the native run in flight (or the next one) → steps run until its draft is
 * complete → it resolves (mid-run, through the run's progress callback), and the pool records what the slot's cache
 * now holds.
 */

import { engineError } from "./errors.js";
import { KvSlotPool } from "./KvSlotPool.js";
import {
    type NativeArrival,
    type NativeEngineHandle,
    type NativeRunProgress,
    nativeStepFields,
} from "./nativeAddon.js";
import type { DraftEngine, DraftOptions, EngineInfo, EngineObserver } from "./types.js";
import { validateDraftRequest } from "./validateDraftRequest.js";

/** The batching settings, resolved by loadEngine (which applies their defaults, once). */
export interface NativeEngineOptions {
    /** Requests that may wait for a free stream before new ones get queue_full. */
    maxQueue: number;
    /** Receives decode, prefix and queue counters. Defaults to none. */
    observer?: EngineObserver;
    /** Decode steps one native run may do before it returns to JS; 0: no limit (LoadEngineOptions.testing). */
    maxStepsPerRun: number;
}

interface PendingDraft {
    tokens: readonly number[];
    n: number;
    endId: number;
    signal: AbortSignal | undefined;
    resolve(draft: number[]): void;
    reject(error: Error): void;
    settled: boolean;
    /** Set while the request is in flight: drops it from the batch at the next step. */
    cancel: (() => void) | undefined;
    onAbort: (() => void) | undefined;
}

interface InFlight {
    request: PendingDraft;
    slot: number;
}

/** A run of steps in progress: native runs back to back while anything waits or drafts. */
interface Running {
    kind: "running";
    /** Settles when the run of steps ends (nothing left to wait for or draft). */
    steps: Promise<void>;
    /** A native run is in flight, so submit() may hand it requests and cancels (else they go with the next one). */
    inNativeRun: boolean;
}

/** Where the step loop is: nothing to do, about to start on the next turn of the event loop, or running. */
type StepLoop = { kind: "idle" } | { kind: "scheduled" } | Running;

export class NativeEngine implements DraftEngine {
    readonly info: EngineInfo;
    private readonly native: NativeEngineHandle;
    private readonly pool: KvSlotPool;
    private readonly maxQueue: number;
    private readonly observer: EngineObserver;
    private readonly maxStepsPerRun: number;
    /** Requests leased a slot but not yet handed to the native side (they go with the next run). */
    private readonly pendingArrivals: NativeArrival[] = [];
    private admitScheduled = false;
    /** Requests waiting for a free stream, in arrival order. */
    private readonly queue: PendingDraft[] = [];
    private readonly inFlight = new Map<number, InFlight>();
    private readonly cancelledIds: number[] = [];
    private nextId = 1;
    private loop: StepLoop = { kind: "idle" };
    /** Set by close(): new drafts are refused, and it settles once the loop is idle and the model freed. */
    private closed: Promise<void> | undefined;

    /** Takes a loaded native engine; `info` describes it. */
    constructor(native: NativeEngineHandle, info: EngineInfo, options: NativeEngineOptions) {
        this.native = native;
        this.info = info;
        this.pool = new KvSlotPool(info.streams);
        this.maxQueue = options.maxQueue;
        this.observer = options.observer ?? {};
        this.maxStepsPerRun = options.maxStepsPerRun;
    }

    draft(tokens: readonly number[], n: number, options: DraftOptions = {}): Promise<number[]> {
        if (this.closed) return Promise.reject(engineError("engine_closed"));
        if (options.signal?.aborted) return Promise.reject(engineError("aborted"));
        const error = validateDraftRequest(this.info, tokens, n, options.endId);
        if (error) return Promise.reject(error);
        if (n === 0) return Promise.resolve([]);
        if (this.queue.length >= this.maxQueue)
            return Promise.reject(engineError("queue_full", { waiting: this.queue.length, limit: this.maxQueue }));
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
            this.scheduleAdmit();
        });
    }

    /** Finishes queued and in-flight drafts, then frees the model. */
    close(): Promise<void> {
        this.closed ??= this.finishAndDispose();
        return this.closed;
    }

    private async finishAndDispose(): Promise<void> {
        // drafts queued before close still run; a scheduled run has no promise to wait on yet, so wait a turn
        while (this.loop.kind !== "idle") {
            await (this.loop.kind === "running"
                ? this.loop.steps
                : new Promise<void>((resolve) => setImmediate(resolve)));
        }
        this.native.dispose();
    }

    /** A native run is in flight: submit() reaches it. */
    private get inNativeRun(): boolean {
        return this.loop.kind === "running" && this.loop.inNativeRun;
    }

    private abort(request: PendingDraft): void {
        if (request.settled) return;
        const index = this.queue.indexOf(request);
        if (index >= 0) this.queue.splice(index, 1);
        request.cancel?.();
        this.settle(request, engineError("aborted"));
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
        this.observer.onQueueDepth?.(this.queue.length + this.inFlight.size);
    }

    /**
     * Admits queued requests into the native run in flight on the next turn of the event loop (requests arriving in
     * one turn join the same step). Without a run in flight, the run loop admits them when it starts one.
     */
    private scheduleAdmit(): void {
        if (!this.inNativeRun || this.admitScheduled) return;
        this.admitScheduled = true;
        setImmediate(() => {
            this.admitScheduled = false;
            this.admit();
        });
    }

    /** Leases slots to queued requests while streams are free; hands them to the run in flight, else keeps them for the next. */
    private admit(): void {
        const arrivals: NativeArrival[] = [];
        while (this.inFlight.size < this.info.streams) {
            const request = this.queue.shift();
            if (request === undefined) break;
            const lease = this.pool.acquire(request.tokens);
            // one slot per stream, so a free stream always has a free slot
            if (lease === undefined)
                throw new Error(`no free KV slot with ${this.inFlight.size} of ${this.info.streams} streams in flight`);
            const id = this.nextId++;
            this.inFlight.set(id, { request, slot: lease.slot });
            const arrival: NativeArrival = {
                id,
                slot: lease.slot,
                keep: lease.reuse,
                tokens: Int32Array.from(request.tokens.slice(lease.reuse)),
                n: request.n,
                endId: request.endId,
            };
            request.cancel = () => {
                // a request the native side has not seen yet is cancelled by the run it goes to (arrivals come first)
                const seen = !this.pendingArrivals.includes(arrival);
                if (!(seen && this.inNativeRun && this.native.submit([], Int32Array.of(id))))
                    this.cancelledIds.push(id);
            };
            arrivals.push(arrival);
            this.observer.onPrefix?.(request.tokens.length - lease.reuse, lease.reuse);
        }
        if (arrivals.length === 0) return;
        this.reportQueueDepth();
        if (!(this.inNativeRun && this.native.submit(arrivals, new Int32Array(0))))
            this.pendingArrivals.push(...arrivals);
    }

    /** Starts the step loop on the next turn of the event loop, so requests arriving together share the first step. */
    private schedule(): void {
        if (this.loop.kind !== "idle") return;
        this.loop = { kind: "scheduled" };
        setImmediate(() => {
            const running: Running = { kind: "running", steps: Promise.resolve(), inNativeRun: false };
            this.loop = running;
            // set after the state, so a run with nothing to do (its request aborted meanwhile) still ends idle
            running.steps = this.runSteps(running);
        });
    }

    /** Runs steps while anything waits or drafts; the loop goes idle in the same turn as the last check. */
    private async runSteps(running: Running): Promise<void> {
        try {
            while (this.queue.length > 0 || this.inFlight.size > 0) await this.runStep(running);
        } finally {
            this.loop = { kind: "idle" };
        }
    }

    private async runStep(running: Running): Promise<void> {
        this.admit();
        const arrivals = this.pendingArrivals.splice(0);
        const cancels = Int32Array.from(this.cancelledIds.splice(0));
        running.inNativeRun = true;
        try {
            const result = await this.native.run(arrivals, cancels, this.maxStepsPerRun, (progress) =>
                this.take(progress),
            );
            running.inNativeRun = false;
            this.take(result);
        } catch (error) {
            running.inNativeRun = false;
            // the native side dropped every request in flight; their caches are in an unknown state
            const reason = error instanceof Error ? error.message : String(error);
            for (const { request, slot } of this.inFlight.values()) {
                this.pool.release(slot, []);
                this.settle(request, new Error(`Draft engine failure: ${reason}`));
            }
            this.inFlight.clear();
            this.pendingArrivals.length = 0;
            this.cancelledIds.length = 0;
            this.reportQueueDepth();
        }
    }

    /** Reports a run's steps and resolves the drafts that finished in them. */
    private take(progress: NativeRunProgress): void {
        const { steps } = progress;
        for (let i = 0; i + nativeStepFields <= steps.length; i += nativeStepFields) {
            // the loop's bound makes all of them present; the defaults only satisfy the index check
            const [
                tokens = 0,
                sequences = 0,
                decodeMs = 0,
                sampleMs = 0,
                hostMs = 0,
                graphsReused = 0,
                submitMs = 0,
                waitMs = 0,
                drafted = 0,
                candidates = 0,
                fillers = 0,
                accepted = 0,
            ] = steps.subarray(i, i + nativeStepFields);
            this.observer.onStep?.({
                tokens,
                sequences,
                decodeMs,
                submitMs,
                waitMs,
                sampleMs,
                hostMs,
                graphReused: graphsReused > 0,
                drafted,
                candidates,
                fillers,
                accepted,
            });
        }
        for (const finished of progress.finished) {
            const entry = this.inFlight.get(finished.id);
            if (entry === undefined)
                throw new Error(`the native run finished draft ${finished.id}, which is not in flight`);
            this.inFlight.delete(finished.id);
            const draft = Array.from(finished.draft);
            this.pool.release(entry.slot, entry.request.tokens.concat(draft).slice(0, finished.cached));
            entry.request.cancel = undefined;
            this.settle(entry.request, draft);
        }
        if (progress.finished.length > 0) {
            this.reportQueueDepth();
            // freed streams take waiting requests at once (into the run in flight, or the next run)
            if (this.inNativeRun) this.admit();
        }
    }
}
