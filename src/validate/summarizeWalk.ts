/**
 * Reduces a walk to the figures summary.json holds: τ = Σ L ÷ Σ steps, per-category τ and τ-macro = their mean (the
 * lab's macro τ: every kind of prompt counts alike, however many conversations it has), the mean of L ÷ steps over
 * conversations,
 * the histogram of accepted lengths a = 0..k, per-position acceptance P(d[i] ok | d[0..i−1] ok), latency and failures.
 */
import { draftFailureKinds } from "../client/types.js";
import type { CategorySummary, PositionAcceptance, WalkResult, WalkSummary } from "./types.js";

/** Category name for conversations whose line had no "category". */
export const uncategorized = "uncategorized";
/** Bars in the latency distribution plot. Defaults to `20`. */
const latencyHistogramBins = 20;

/** What summary.json records besides the walk itself. */
export interface SummarizeOptions {
    /** The data file and how many of its lines were rejected, recorded in the summary. */
    data?: { file: string; rejectedLines: number };
    /** Timestamp to record. Defaults to now. */
    createdAt?: Date;
}

/** The summary.json figures of one server's walk. */
export function summarizeWalk(result: WalkResult, options: SummarizeOptions = {}): WalkSummary {
    const k = result.draftLength;
    const histogram = new Array<number>(k + 1).fill(0);
    const positions = Array.from({ length: k }, (_, position) => ({ position, attempts: 0, accepted: 0 }));
    const failures = Object.fromEntries(draftFailureKinds.map((kind) => [kind, 0])) as WalkSummary["failures"];
    failures.total = 0;
    const latencies: number[] = [];
    const categories = new Map<string, { tokens: number; steps: number; samples: number }>();
    let tokens = 0;
    let steps = 0;
    let macroSum = 0;
    let macroCount = 0;

    for (const walk of result.conversations) {
        tokens += walk.tokens;
        steps += walk.steps.length;
        if (walk.steps.length > 0) {
            macroSum += walk.tokens / walk.steps.length;
            macroCount++;
        }
        const category = categories.get(walk.category ?? uncategorized) ?? { tokens: 0, steps: 0, samples: 0 };
        category.tokens += walk.tokens;
        category.steps += walk.steps.length;
        category.samples++;
        categories.set(walk.category ?? uncategorized, category);

        for (const step of walk.steps) {
            increment(histogram, step.accepted);
            // position i was checked iff d[0..i−1] were all accepted (i ≤ a) and it was within the cap (i < cap)
            for (const at of positions) {
                if (at.position > step.accepted || at.position >= step.cap) break;
                at.attempts++;
                if (at.position < step.accepted) at.accepted++;
            }
            latencies.push(step.latencyMs);
            if (step.failure !== undefined) {
                failures[step.failure]++;
                failures.total++;
            }
        }
    }

    latencies.sort((a, b) => a - b);
    const perPosition: PositionAcceptance[] = positions.map((at) => ({
        ...at,
        rate: at.attempts > 0 ? at.accepted / at.attempts : null,
    }));
    const perCategory: Record<string, CategorySummary> = {};
    for (const [name, c] of [...categories].sort(([a], [b]) => a.localeCompare(b)))
        perCategory[name] = {
            tau: c.steps > 0 ? c.tokens / c.steps : null,
            tokens: c.tokens,
            steps: c.steps,
            samples: c.samples,
        };

    const summary: WalkSummary = {
        metric: "mean_acceptance_length",
        server: { ...result.server },
        tau: steps > 0 ? tokens / steps : null,
        tokens,
        steps,
        samples: result.conversations.length,
        draft_tokens: k,
        tau_macro_over_categories: meanOf(Object.values(perCategory).map((c) => c.tau)),
        tau_macro_over_prompts: macroCount > 0 ? macroSum / macroCount : null,
        per_category: perCategory,
        acceptance_histogram: histogram,
        per_position_acceptance: perPosition,
        requests: latencies.length,
        requests_per_second: result.servingSeconds > 0 ? latencies.length / result.servingSeconds : null,
        latency_ms: {
            p50: roundMs(percentile(latencies, 50)),
            p95: roundMs(percentile(latencies, 95)),
            p99: roundMs(percentile(latencies, 99)),
            mean: roundMs(latencies.length > 0 ? latencies.reduce((sum, x) => sum + x, 0) / latencies.length : null),
            max: roundMs(latencies.at(-1) ?? null),
        },
        latency_histogram_ms: latencyHistogram(latencies),
        serving_seconds: result.servingSeconds,
        failures,
        concurrency: result.concurrency,
        timeout_ms: result.timeoutMs,
        created_at: (options.createdAt ?? new Date()).toISOString(),
    };
    if (options.data) summary.data = { file: options.data.file, rejected_lines: options.data.rejectedLines };
    return summary;
}

/** Equal-width bins from 0 to the slowest request (ascending `sorted`). */
function latencyHistogram(sorted: readonly number[]): WalkSummary["latency_histogram_ms"] {
    const max = sorted.at(-1);
    if (max === undefined) return { edges: [], counts: [] };
    const width = niceStep(max / latencyHistogramBins);
    const bins = Math.max(1, Math.ceil(max / width));
    const counts = new Array<number>(bins).fill(0);
    for (const ms of sorted) increment(counts, Math.min(bins - 1, Math.floor(ms / width)));
    const edges = Array.from({ length: bins + 1 }, (_, i) => roundMs(i * width) as number);
    return { edges, counts };
}

/** The smallest of 1, 2, 2.5, 5 × 10^n that is ≥ `x`, so bin edges read well. */
function niceStep(x: number): number {
    if (!(x > 0)) return 1;
    const magnitude = 10 ** Math.floor(Math.log10(x));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * magnitude >= x) return m * magnitude;
    return 10 * magnitude;
}

/** Adds 1 to `counts[index]`; an index outside the array is a bug in the caller, not a count to drop. */
function increment(counts: number[], index: number): void {
    const count = counts[index];
    if (count === undefined) throw new RangeError(`count ${index} is outside 0–${counts.length - 1}`);
    counts[index] = count + 1;
}

function roundMs(ms: number | null): number | null {
    return ms === null ? null : Math.round(ms * 1000) / 1000;
}

/**
 * The `p`-th percentile (0 ≤ p ≤ 100) of `sortedValues` (ascending), or null for no values: linear interpolation
 * between closest ranks (numpy's default). The benches report their latencies with it too.
 */
export function percentile(sortedValues: readonly number[], p: number): number | null {
    const rank = (p / 100) * (sortedValues.length - 1);
    const belowRank = Math.floor(rank);
    const below = sortedValues[belowRank];
    const above = sortedValues[Math.min(belowRank + 1, sortedValues.length - 1)];
    // both are missing only when there are no values
    if (below === undefined || above === undefined) return null;
    return below + (above - below) * (rank - belowRank);
}

/** The mean of the values that are not null; null when none are. */
function meanOf(values: readonly (number | null)[]): number | null {
    const present = values.filter((v): v is number => v !== null);
    return present.length > 0 ? present.reduce((sum, v) => sum + v, 0) / present.length : null;
}
