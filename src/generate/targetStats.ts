/**
 * Arithmetic on a native target's call totals (NativeTargetStats): what a span of calls cost, and the sum of several
 * spans. `specdraft generate` records a span per generation and `specdraft speedup` one per probe, in these fields.
 */
import type { NativeTargetStats } from "./types.js";

const fields = ["decodes", "tokens", "submitMs", "waitMs", "readMs", "graphsReused"] as const;

/** The calls made between two snapshots of a target's stats: `after − before`, field by field. */
export function statsSince(after: NativeTargetStats, before: NativeTargetStats): NativeTargetStats {
    return Object.fromEntries(fields.map((f) => [f, after[f] - before[f]])) as unknown as NativeTargetStats;
}

/** The field-by-field sum of several spans (all zeros for none). */
export function sumStats(spans: readonly NativeTargetStats[]): NativeTargetStats {
    return Object.fromEntries(
        fields.map((f) => [f, spans.reduce((total, span) => total + span[f], 0)]),
    ) as unknown as NativeTargetStats;
}

/** A span's figures per call: each field ÷ `calls` (a verification, a generation step). */
export function perCall(span: NativeTargetStats, calls: number): NativeTargetStats {
    return Object.fromEntries(
        fields.map((f) => [f, calls === 0 ? 0 : span[f] / calls]),
    ) as unknown as NativeTargetStats;
}
