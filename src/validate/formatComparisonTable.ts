/** The table `specdraft validate` prints at the end: one column per server, side by side. */
import type { WalkSummary } from "./types.js";

/** One row per figure, one column per server, columns aligned. */
export function formatComparisonTable(summaries: readonly WalkSummary[]): string {
    const rows: [string, (s: WalkSummary) => string][] = [
        ["τ", (s) => fixed(s.tau, 4)],
        ["τ-macro (categories)", (s) => fixed(s.tau_macro_over_categories, 4)],
        ["τ per conversation", (s) => fixed(s.tau_macro_over_prompts, 4)],
        ["tokens", (s) => String(s.tokens)],
        ["steps", (s) => String(s.steps)],
        ["conversations", (s) => String(s.samples)],
        ["requests/s", (s) => fixed(s.requests_per_second, 1)],
        ["p50 latency ms", (s) => fixed(s.latency_ms.p50, 1)],
        ["p95 latency ms", (s) => fixed(s.latency_ms.p95, 1)],
        ["serving s", (s) => fixed(s.serving_seconds, 1)],
        ["failures", (s) => String(s.failures.total)],
    ];
    const header = ["", ...summaries.map((s) => s.server.name)];
    const body = rows.map(([label, cell]) => [label, ...summaries.map(cell)]);
    const widths = header.map((_, column) => Math.max(...[header, ...body].map((row) => row[column]?.length ?? 0)));
    const line = (row: string[]): string =>
        widths
            .map((width, column) =>
                column === 0 ? (row[column] ?? "").padEnd(width) : (row[column] ?? "").padStart(width),
            )
            .join("  ");
    const rule = widths.map((w) => "─".repeat(w)).join("  ");
    return [line(header), rule, ...body.map(line)].join("\n");
}

function fixed(value: number | null, digits: number): string {
    return value === null ? "n/a" : value.toFixed(digits);
}
