/**
 * The server's Prometheus metrics (prom-client, one Registry per app so tests and several apps never share counters).
 * HTTP metrics come from the app's onResponse hook; engine metrics from `engineObserver`, which is handed to the engine
 * when it is loaded.
 */

import { Counter, Gauge, Histogram, Registry } from "prom-client";
import type { EngineObserver } from "../engine/types.js";

/** Latency buckets in seconds: drafts take milliseconds on a GPU and up to seconds on a small CPU. */
const latencyBuckets = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];
/** Per-step times in seconds: a decode step takes ~0.1–10 ms on a GPU, up to ~100 ms on a small CPU. */
const stepBuckets = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.004, 0.006, 0.008, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25,
];
/** Sequences per llama_decode: powers of two up to the largest stream counts we run. */
const batchBuckets = [1, 2, 4, 8, 16, 32, 64, 128, 256];

export class ServerMetrics {
    readonly registry = new Registry();

    private readonly requests = new Counter({
        name: "specdraft_http_requests_total",
        help: "HTTP requests answered, by route, method and status code.",
        labelNames: ["route", "method", "status"] as const,
        registers: [this.registry],
    });

    private readonly latency = new Histogram({
        name: "specdraft_http_request_duration_seconds",
        help: "Time from receiving a request to sending its answer, by route.",
        labelNames: ["route"] as const,
        buckets: latencyBuckets,
        registers: [this.registry],
    });

    private readonly decodeSequences = new Histogram({
        name: "specdraft_decode_batch_sequences",
        help: "Sequences in each batched llama_decode call.",
        buckets: batchBuckets,
        registers: [this.registry],
    });

    private readonly decodeTokens = new Counter({
        name: "specdraft_decode_tokens_total",
        help: "Tokens sent through llama_decode (prefill and drafting).",
        registers: [this.registry],
    });

    private readonly stepDecode = new Histogram({
        name: "specdraft_step_decode_seconds",
        help: "Time per decode step in llama_decode and the wait for its result (the device's work).",
        buckets: stepBuckets,
        registers: [this.registry],
    });

    private readonly stepSubmit = new Histogram({
        name: "specdraft_step_submit_seconds",
        help: "Time per decode step in the llama_decode call itself (part of the decode time): on a GPU the host's part — graph reuse or rebuild, inputs, kernel or CUDA-graph launch — while the device may already run.",
        buckets: stepBuckets,
        registers: [this.registry],
    });

    private readonly stepWait = new Histogram({
        name: "specdraft_step_wait_seconds",
        help: "Time per decode step in llama_synchronize after llama_decode (the rest of the decode time): the device finishing its work.",
        buckets: stepBuckets,
        registers: [this.registry],
    });

    private readonly stepSample = new Histogram({
        name: "specdraft_step_sample_seconds",
        help: "Time per decode step fetching the outputs and taking their argmax (or the sampled ids).",
        buckets: stepBuckets,
        registers: [this.registry],
    });

    private readonly stepHost = new Histogram({
        name: "specdraft_step_host_seconds",
        help: "Time per decode step since the previous step ended, outside llama.cpp: batch building and JS round trips while requests were in flight.",
        buckets: stepBuckets,
        registers: [this.registry],
    });

    private readonly stepGraphReused = new Counter({
        name: "specdraft_step_graph_reused_total",
        help: "Decode steps for which llama.cpp reused its compute graph (same batch shape and sequences) instead of rebuilding it; only these can replay a CUDA graph.",
        registers: [this.registry],
    });

    private readonly draftTokens = new Counter({
        name: "specdraft_draft_tokens_total",
        help: "Draft tokens the decode steps produced (over the steps' count: draft tokens per sequence and step, above 1 with candidates).",
        registers: [this.registry],
    });

    private readonly lookaheadCandidates = new Counter({
        name: "specdraft_lookahead_candidates_total",
        help: "Candidate positions decoded after the sequences' own tokens (prompt lookup over each request's own tokens; fillers included).",
        registers: [this.registry],
    });

    private readonly lookaheadFillers = new Counter({
        name: "specdraft_lookahead_fillers_total",
        help: "Of the candidate positions, fillers: decoded only so every step keeps its shape, where the lookup had no guess.",
        registers: [this.registry],
    });

    private readonly lookaheadAccepted = new Counter({
        name: "specdraft_lookahead_accepted_total",
        help: "Candidates kept because each equalled the drafter's own greedy token there (draft tokens gained without a step of their own).",
        registers: [this.registry],
    });

    private readonly prefixEvaluated = new Counter({
        name: "specdraft_prefix_tokens_evaluated_total",
        help: "Request context tokens that had to be evaluated (not found in a sequence's KV cache).",
        registers: [this.registry],
    });

    private readonly prefixReused = new Counter({
        name: "specdraft_prefix_tokens_reused_total",
        help: "Request context tokens reused from a sequence's KV cache.",
        registers: [this.registry],
    });

    private readonly queueDepth = new Gauge({
        name: "specdraft_queue_depth",
        help: "Draft requests waiting for or in a batch.",
        registers: [this.registry],
    });

    /** Counts what the engine reports; pass it to loadEngine. */
    readonly engineObserver: EngineObserver = {
        onStep: (step) => {
            this.decodeTokens.inc(step.tokens);
            this.decodeSequences.observe(step.sequences);
            if (step.graphReused) this.stepGraphReused.inc();
            this.stepDecode.observe(step.decodeMs / 1000);
            this.stepSubmit.observe(step.submitMs / 1000);
            this.stepWait.observe(step.waitMs / 1000);
            this.stepSample.observe(step.sampleMs / 1000);
            this.stepHost.observe(step.hostMs / 1000);
            this.draftTokens.inc(step.drafted);
            this.lookaheadCandidates.inc(step.candidates);
            this.lookaheadFillers.inc(step.fillers);
            this.lookaheadAccepted.inc(step.accepted);
        },
        onPrefix: (evaluated, reused) => {
            this.prefixEvaluated.inc(evaluated);
            this.prefixReused.inc(reused);
        },
        onQueueDepth: (depth) => this.queueDepth.set(depth),
    };

    /** Records one answered request; `route` is the route pattern (or `unmatched`), never the raw URL. */
    recordRequest(route: string, method: string, status: number, seconds: number): void {
        this.requests.inc({ route, method, status: String(status) });
        this.latency.observe({ route }, seconds);
    }

    get contentType(): string {
        return this.registry.contentType;
    }

    /** The Prometheus text exposition of every metric. */
    render(): Promise<string> {
        return this.registry.metrics();
    }
}
