/**
 * Shared types of the validator: held-out conversations, the walk's records and the summary it writes.
 *
 * A conversation's path: JSONL line (parseHeldOutLine) → walkConversation asks a DraftClient (src/client) for drafts
 * step by step → WalkResult per server (walkHeldOut) → summarizeWalk → summary.json / report.html / the terminal table.
 */

import type { DraftFailureKind } from "../client/types.js";

/** One held-out conversation: the prompt and the target model's greedy continuation of it. */
export interface Conversation {
    id: string;
    /** Groups conversations for per-category τ; absent in the data means "uncategorized". */
    category?: string;
    promptTokens: number[];
    continuationTokens: number[];
    /** 1-based line of the JSONL file it came from. */
    lineNumber: number;
}

/** A JSONL line that was not a valid conversation. */
export interface RejectedLine {
    /** 1-based. */
    lineNumber: number;
    message: string;
}

/** One step of the walk. */
export interface WalkStep {
    /** Accepted draft tokens (leading matches), 0 ≤ accepted ≤ cap. */
    accepted: number;
    /** min(k, L − pos): how many draft positions could be checked at this step. */
    cap: number;
    latencyMs: number;
    failure?: DraftFailureKind;
}

/** One conversation walked against one server. */
export interface ConversationWalk {
    id: string;
    category?: string;
    /** Continuation length L. */
    tokens: number;
    steps: WalkStep[];
}

/** A whole held-out set walked against one server. */
export interface WalkResult {
    server: { name: string; url: string };
    draftLength: number;
    concurrency: number;
    timeoutMs: number;
    conversations: ConversationWalk[];
    /** Wall-clock seconds from the first request to the last answer. */
    servingSeconds: number;
}

/** Acceptance at one draft position i: P(d[i] ok | d[0..i−1] ok). */
export interface PositionAcceptance {
    position: number;
    /** Steps where d[0..i−1] were all accepted and position i could be checked (i < cap). */
    attempts: number;
    /** Of those, steps where d[i] matched too. */
    accepted: number;
    /** accepted ÷ attempts, or null when there were no attempts. */
    rate: number | null;
}

/** τ and its counts over one category's conversations. */
export interface CategorySummary {
    tau: number | null;
    tokens: number;
    steps: number;
    samples: number;
}

/** summary.json: everything measured on one server. Field names are snake_case as in the file. */
export interface WalkSummary {
    metric: "mean_acceptance_length";
    server: { name: string; url: string };
    /** tokens ÷ steps; null when nothing was walked. */
    tau: number | null;
    tokens: number;
    steps: number;
    /** Conversations walked. */
    samples: number;
    /** k: draft tokens asked for per request. */
    draft_tokens: number;
    /** Mean over categories (with steps) of their τ: the lab's macro τ (`TauResult.macro_tau` in train/). */
    tau_macro_over_categories: number | null;
    /** Mean over conversations (with L > 0) of L ÷ steps. */
    tau_macro_over_prompts: number | null;
    per_category: Record<string, CategorySummary>;
    /** acceptance_histogram[a] = steps that accepted exactly a draft tokens, a = 0..k. */
    acceptance_histogram: number[];
    per_position_acceptance: PositionAcceptance[];
    requests: number;
    requests_per_second: number | null;
    latency_ms: { p50: number | null; p95: number | null; p99: number | null; mean: number | null; max: number | null };
    /** Latency distribution for the report's plot: counts[i] requests took edges[i] ≤ ms < edges[i+1]. */
    latency_histogram_ms: { edges: number[]; counts: number[] };
    serving_seconds: number;
    failures: { total: number } & Record<DraftFailureKind, number>;
    concurrency: number;
    timeout_ms: number;
    data?: { file: string; rejected_lines: number };
    created_at: string;
}
