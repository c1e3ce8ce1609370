/**
 * A bar chart as inline SVG (no script, no external resources), for report.html. Each bar is a `<rect class="bar">`
 * carrying its value in `data-value` and a `<title>` tooltip, so a test can count and read the bars.
 */
import { escapeHtml } from "./escapeHtml.js";

export interface BarChartSpec {
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

const width = 640;
const height = 280;
const margin = { top: 34, right: 16, bottom: 52, left: 56 };

export function renderBarChart(spec: BarChartSpec): string {
    const format = spec.format ?? ((v: number) => Number(v.toPrecision(3)).toString());
    const numeric = spec.values.filter((v): v is number => v !== null);
    const top = spec.yMax ?? roundedTop(Math.max(0, ...numeric), spec.integerValues ?? false);
    const plotWidth = width - margin.left - margin.right;
    const plotHeight = height - margin.top - margin.bottom;
    const slot = plotWidth / Math.max(1, spec.labels.length);
    const barWidth = Math.max(1, slot * 0.8);
    // write at most ~16 x labels so they stay legible
    const labelEvery = Math.max(1, Math.ceil(spec.labels.length / 16));
    const parts: string[] = [];
    parts.push(
        `<svg class="chart" data-plot="${escapeHtml(spec.id)}" viewBox="0 0 ${width} ${height}" width="${width}" height="${height}" role="img" aria-label="${escapeHtml(spec.title)}">`,
        `<text class="chart-title" x="${width / 2}" y="20" text-anchor="middle">${escapeHtml(spec.title)}</text>`
    );
    for (const fraction of [0, 0.25, 0.5, 0.75, 1]) {
        const y = margin.top + plotHeight * (1 - fraction);
        parts.push(
            `<line class="grid" x1="${margin.left}" x2="${width - margin.right}" y1="${y.toFixed(1)}" y2="${y.toFixed(1)}"/>`,
            `<text class="tick" x="${margin.left - 6}" y="${(y + 4).toFixed(1)}" text-anchor="end">${escapeHtml(format(top * fraction))}</text>`
        );
    }
    spec.labels.forEach((label, i) => {
        const value = spec.values[i];
        const barHeight = value === null ? 0 : (Math.max(0, value) / top) * plotHeight;
        const x = margin.left + slot * i + (slot - barWidth) / 2;
        const y = margin.top + plotHeight - barHeight;
        const shown = value === null ? "n/a" : format(value);
        parts.push(
            `<rect class="bar" x="${x.toFixed(1)}" y="${y.toFixed(1)}" width="${barWidth.toFixed(1)}" height="${barHeight.toFixed(1)}" fill="${spec.color ?? "#3b6fb6"}" data-label="${escapeHtml(label)}" data-value="${value === null ? "" : value}"><title>${escapeHtml(`${label}: ${shown}`)}</title></rect>`
        );
        if (i % labelEvery === 0)
            parts.push(`<text class="tick" x="${(margin.left + slot * i + slot / 2).toFixed(1)}" y="${margin.top + plotHeight + 16}" text-anchor="middle">${escapeHtml(label)}</text>`);
    });
    parts.push(
        `<line class="axis" x1="${margin.left}" x2="${width - margin.right}" y1="${margin.top + plotHeight}" y2="${margin.top + plotHeight}"/>`,
        `<text class="axis-label" x="${margin.left + plotWidth / 2}" y="${height - 10}" text-anchor="middle">${escapeHtml(spec.xLabel)}</text>`,
        `<text class="axis-label" transform="translate(14 ${margin.top + plotHeight / 2}) rotate(-90)" text-anchor="middle">${escapeHtml(spec.yLabel)}</text>`,
        `</svg>`
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
