/**
 * report.html: one self-contained page (inline CSS and SVG, no script, no external resources) with, per server, its
 * figures and four plots: acceptance-length histogram, per-position acceptance, τ by category, latency distribution.
 * With several servers it opens with a side-by-side comparison.
 *
 * Each plot is a bar chart drawn here as inline SVG: every bar is a `<rect class="bar">` carrying its value in
 * `data-value` and a `<title>` tooltip, so a test can count and read the bars.
 */
import type { WalkSummary } from "./types.js";

const serverColors = ["#3b6fb6", "#d9822b", "#3a9a5b", "#b23b5a", "#7a5cc2", "#2a9d9d"];

/** The whole page for one server, or for several with the comparison first. */
export function renderReportHtml(summaries: readonly WalkSummary[]): string {
    const [first] = summaries;
    const title =
        summaries.length === 1 && first !== undefined
            ? `τ report — ${first.server.name}`
            : `τ comparison — ${summaries.map((s) => s.server.name).join(" vs ")}`;
    const body: string[] = [`<h1>${escapeHtml(title)}</h1>`];
    if (first?.data)
        body.push(
            `<p class="meta">Data: ${escapeHtml(first.data.file)} · ${first.samples} conversations · ${first.data.rejected_lines} rejected lines · k = ${first.draft_tokens} · ${escapeHtml(first.created_at)}</p>`,
        );
    if (summaries.length > 1) body.push(renderComparison(summaries));
    for (const [i, summary] of summaries.entries())
        body.push(renderServerSection(summary, serverColors[i % serverColors.length]));
    return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>${escapeHtml(title)}</title>
<style>
body { font: 14px/1.45 system-ui, sans-serif; margin: 24px auto; max-width: 1340px; color: #1d2330; padding: 0 16px; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 32px; border-bottom: 1px solid #d5dae3; }
.meta { color: #566074; }
table { border-collapse: collapse; margin: 8px 0 16px; }
th, td { border: 1px solid #d5dae3; padding: 4px 10px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
.chart { background: #fafbfd; border: 1px solid #e3e7ee; }
.chart .grid { stroke: #e3e7ee; } .chart .axis { stroke: #566074; }
.chart text { font-size: 11px; fill: #39424f; } .chart .chart-title { font-size: 14px; font-weight: 600; }
.chart .axis-label { font-size: 12px; }
.bad { color: #b23b3b; font-weight: 600; }
</style>
</head>
<body>
${body.join("\n")}
</body>
</html>
`;
}

function renderComparison(summaries: readonly WalkSummary[]): string {
    const rows: [string, (s: WalkSummary) => string][] = [
        ["τ", (s) => fixed(s.tau, 4)],
        ["τ-macro (categories)", (s) => fixed(s.tau_macro_over_categories, 4)],
        ["τ per conversation", (s) => fixed(s.tau_macro_over_prompts, 4)],
        ["tokens", (s) => s.tokens.toLocaleString("en-US")],
        ["steps", (s) => s.steps.toLocaleString("en-US")],
        ["requests/s", (s) => fixed(s.requests_per_second, 1)],
        ["p50 latency (ms)", (s) => fixed(s.latency_ms.p50, 1)],
        ["p95 latency (ms)", (s) => fixed(s.latency_ms.p95, 1)],
        ["serving seconds", (s) => fixed(s.serving_seconds, 1)],
        ["failures", (s) => String(s.failures.total)],
    ];
    const header = `<tr><th></th>${summaries.map((s) => `<th>${escapeHtml(s.server.name)}</th>`).join("")}</tr>`;
    const lines = rows.map(
        ([label, cell]) =>
            `<tr><td>${escapeHtml(label)}</td>${summaries.map((s) => `<td>${escapeHtml(cell(s))}</td>`).join("")}</tr>`,
    );
    const tauChart = renderBarChart({
        id: "tau-by-server",
        title: "τ (mean acceptance length) by server",
        xLabel: "server",
        yLabel: "τ",
        labels: summaries.map((s) => s.server.name),
        values: summaries.map((s) => s.tau),
        yMax: Math.max(...summaries.map((s) => s.draft_tokens)) + 1,
    });
    return `<section class="comparison"><h2>Comparison</h2><table>${header}${lines.join("")}</table><div class="charts">${tauChart}</div></section>`;
}

/** One server's figures and plots, its bars in `color` (the charts' default when there is none). */
function renderServerSection(s: WalkSummary, color: string | undefined): string {
    const k = s.draft_tokens;
    const figures: [string, string][] = [
        ["server", s.server.url],
        ["τ (tokens ÷ steps)", fixed(s.tau, 4)],
        ["τ-macro (mean over categories)", fixed(s.tau_macro_over_categories, 4)],
        ["τ per conversation (mean over conversations)", fixed(s.tau_macro_over_prompts, 4)],
        ["tokens / steps / conversations", `${s.tokens} / ${s.steps} / ${s.samples}`],
        ["draft length k", String(k)],
        ["requests/s", fixed(s.requests_per_second, 1)],
        [
            "latency p50 / p95 / p99 (ms)",
            `${fixed(s.latency_ms.p50, 1)} / ${fixed(s.latency_ms.p95, 1)} / ${fixed(s.latency_ms.p99, 1)}`,
        ],
        ["serving seconds", fixed(s.serving_seconds, 2)],
        [
            "failures (timeout / http / network / malformed)",
            `${s.failures.total} (${s.failures.timeout} / ${s.failures.http} / ${s.failures.network} / ${s.failures.malformed})`,
        ],
    ];
    const table = figures
        .map(
            ([label, value]) =>
                `<tr><td>${escapeHtml(label)}</td><td${label.startsWith("failures") && s.failures.total > 0 ? ' class="bad"' : ""}>${escapeHtml(value)}</td></tr>`,
        )
        .join("");
    const categories = Object.entries(s.per_category);
    const charts = [
        renderBarChart({
            id: "acceptance-histogram",
            title: "Accepted draft tokens per step (a)",
            xLabel: "a (accepted tokens)",
            yLabel: "steps",
            labels: s.acceptance_histogram.map((_, a) => String(a)),
            values: s.acceptance_histogram,
            format: integer,
            integerValues: true,
            color,
        }),
        renderBarChart({
            id: "per-position-acceptance",
            title: "Acceptance at draft position i, given 0..i−1 accepted",
            xLabel: "draft position i",
            yLabel: "P(d[i] ok | d[0..i−1] ok)",
            labels: s.per_position_acceptance.map((p) => String(p.position)),
            values: s.per_position_acceptance.map((p) => p.rate),
            yMax: 1,
            format: (v) => v.toFixed(2),
            color,
        }),
        renderBarChart({
            id: "tau-by-category",
            title: "τ by category",
            xLabel: "category",
            yLabel: "τ",
            labels: categories.map(([name, c]) => `${name} (${c.samples})`),
            values: categories.map(([, c]) => c.tau),
            yMax: k + 1,
            color,
        }),
        renderBarChart({
            id: "latency-distribution",
            title: "Draft request latency",
            xLabel: "latency (ms, bin start)",
            yLabel: "requests",
            // a bin is labelled by its lower edge: every edge but the last
            labels: s.latency_histogram_ms.edges.slice(0, -1).map(compact),
            values: s.latency_histogram_ms.counts,
            format: integer,
            integerValues: true,
            color,
        }),
    ];
    return `<section class="server" data-server="${escapeHtml(s.server.name)}"><h2>${escapeHtml(s.server.name)}</h2><table>${table}</table><div class="charts">${charts.join("\n")}</div></section>`;
}

function fixed(value: number | null, digits: number): string {
    return value === null ? "n/a" : value.toFixed(digits);
}

function integer(value: number): string {
    return Math.round(value).toLocaleString("en-US");
}

function compact(ms: number): string {
    return Number(ms.toPrecision(3)).toString();
}

/** One bar chart of the report. */
interface BarChartSpec {
    /** `data-plot` attribute of the `<svg>`, e.g. `acceptance-histogram`. */
    id: string;
    title: string;
    xLabel: string;
    yLabel: string;
    labels: readonly string[];
    /** One per label; null draws an empty slot (e.g. a position never reached). */
    values: readonly (number | null)[];
    /** Top of the y axis. Defaults to the largest value rounded up so the four gridlines fall on round numbers. */
    yMax?: number;
    /** Values are counts: gridlines on whole numbers. Defaults to `false`. */
    integerValues?: boolean;
    /** How values are written in tooltips and on the axis. Defaults to 3 significant digits. */
    format?: (value: number) => string;
    /** Bar colour. Defaults to `#3b6fb6`. */
    color?: string;
}

/** Every chart's size in px, and the room around its plot area for the axes and labels. */
const chartWidth = 640;
const chartHeight = 280;
const chartMargin = { top: 34, right: 16, bottom: 52, left: 56 };

function renderBarChart(spec: BarChartSpec): string {
    const format = spec.format ?? ((v: number) => Number(v.toPrecision(3)).toString());
    const numeric = spec.values.filter((v): v is number => v !== null);
    const top = spec.yMax ?? roundedTop(Math.max(0, ...numeric), spec.integerValues ?? false);
    const plotWidth = chartWidth - chartMargin.left - chartMargin.right;
    const plotHeight = chartHeight - chartMargin.top - chartMargin.bottom;
    const slot = plotWidth / Math.max(1, spec.labels.length);
    const barWidth = Math.max(1, slot * 0.8);
    // write at most ~16 x labels so they stay legible
    const labelEvery = Math.max(1, Math.ceil(spec.labels.length / 16));
    const parts: string[] = [];
    parts.push(
        `<svg class="chart" data-plot="${escapeHtml(spec.id)}" viewBox="0 0 ${chartWidth} ${chartHeight}" width="${chartWidth}" height="${chartHeight}" role="img" aria-label="${escapeHtml(spec.title)}">`,
        `<text class="chart-title" x="${chartWidth / 2}" y="20" text-anchor="middle">${escapeHtml(spec.title)}</text>`,
    );
    for (const fraction of [0, 0.25, 0.5, 0.75, 1]) {
        const y = chartMargin.top + plotHeight * (1 - fraction);
        parts.push(
            `<line class="grid" x1="${chartMargin.left}" x2="${chartWidth - chartMargin.right}" y1="${y.toFixed(1)}" y2="${y.toFixed(1)}"/>`,
            `<text class="tick" x="${chartMargin.left - 6}" y="${(y + 4).toFixed(1)}" text-anchor="end">${escapeHtml(format(top * fraction))}</text>`,
        );
    }
    spec.labels.forEach((label, i) => {
        // a label without a value draws an empty slot, like null
        const value = spec.values[i] ?? null;
        const barHeight = value === null ? 0 : (Math.max(0, value) / top) * plotHeight;
        const x = chartMargin.left + slot * i + (slot - barWidth) / 2;
        const y = chartMargin.top + plotHeight - barHeight;
        const shown = value === null ? "n/a" : format(value);
        parts.push(
            `<rect class="bar" x="${x.toFixed(1)}" y="${y.toFixed(1)}" width="${barWidth.toFixed(1)}" height="${barHeight.toFixed(1)}" fill="${spec.color ?? "#3b6fb6"}" data-label="${escapeHtml(label)}" data-value="${value === null ? "" : value}"><title>${escapeHtml(`${label}: ${shown}`)}</title></rect>`,
        );
        if (i % labelEvery === 0)
            parts.push(
                `<text class="tick" x="${(chartMargin.left + slot * i + slot / 2).toFixed(1)}" y="${chartMargin.top + plotHeight + 16}" text-anchor="middle">${escapeHtml(label)}</text>`,
            );
    });
    parts.push(
        `<line class="axis" x1="${chartMargin.left}" x2="${chartWidth - chartMargin.right}" y1="${chartMargin.top + plotHeight}" y2="${chartMargin.top + plotHeight}"/>`,
        `<text class="axis-label" x="${chartMargin.left + plotWidth / 2}" y="${chartHeight - 10}" text-anchor="middle">${escapeHtml(spec.xLabel)}</text>`,
        `<text class="axis-label" transform="translate(14 ${chartMargin.top + plotHeight / 2}) rotate(-90)" text-anchor="middle">${escapeHtml(spec.yLabel)}</text>`,
        `</svg>`,
    );
    return parts.join("\n");
}

/** The smallest 4 × (1, 2, 2.5 or 5 × 10^n) ≥ `max`; for counts 4 × (1, 2, 3 or 5 × 10^n), at least 4. */
function roundedTop(max: number, integerValues: boolean): number {
    if (!(max > 0)) return integerValues ? 4 : 1;
    const quarter = max / 4;
    const magnitude = 10 ** Math.floor(Math.log10(quarter));
    for (const m of integerValues ? [1, 2, 3, 5, 10] : [1, 2, 2.5, 5, 10]) {
        const step = m * magnitude;
        if (integerValues && step < 1) continue;
        if (step >= quarter) return 4 * step;
    }
    return 40 * magnitude;
}

/** Escapes text for HTML element content and attribute values. */
function escapeHtml(text: string): string {
    return text
        .replace(/&/g, "&amp;")
        .replace(/</g, "&lt;")
        .replace(/>/g, "&gt;")
        .replace(/"/g, "&quot;")
        .replace(/'/g, "&#39;");
}
