/**
 * Writes a validate run's results to a folder. One server: DIR/summary.json and DIR/report.html. Several servers:
 * DIR/<server>/summary.json and DIR/<server>/report.html each, plus DIR/comparison.json and a combined DIR/report.html.
 */
import { mkdir, rename, writeFile } from "node:fs/promises";
import path from "node:path";
import { renderReportHtml } from "./renderReportHtml.js";
import type { WalkSummary } from "./types.js";

/** The files written, for the CLI to print. */
export interface WrittenReport {
    summaries: string[];
    reports: string[];
    comparison?: string;
}

/** Writes the files for `summaries` (one per server, in order) under `dir`, creating it. */
export async function writeReport(dir: string, summaries: readonly WalkSummary[]): Promise<WrittenReport> {
    await mkdir(dir, { recursive: true });
    const [only] = summaries;
    if (summaries.length === 1 && only !== undefined) {
        const summaryFile = path.join(dir, "summary.json");
        const reportFile = path.join(dir, "report.html");
        await writeAtomically(summaryFile, `${JSON.stringify(only, null, 2)}\n`);
        await writeAtomically(reportFile, renderReportHtml(summaries));
        return { summaries: [summaryFile], reports: [reportFile] };
    }
    const written: WrittenReport = { summaries: [], reports: [] };
    const folderOf = serverFolderNamer();
    const servers = summaries.map((summary) => ({ summary, folder: folderOf(summary.server.name) }));
    for (const { summary, folder } of servers) {
        const serverDir = path.join(dir, folder);
        await mkdir(serverDir, { recursive: true });
        const summaryFile = path.join(serverDir, "summary.json");
        const reportFile = path.join(serverDir, "report.html");
        await writeAtomically(summaryFile, `${JSON.stringify(summary, null, 2)}\n`);
        await writeAtomically(reportFile, renderReportHtml([summary]));
        written.summaries.push(summaryFile);
        written.reports.push(reportFile);
    }
    const comparison = {
        metric: "mean_acceptance_length",
        servers: servers.map(({ summary: s, folder }) => ({
            name: s.server.name,
            url: s.server.url,
            folder,
            tau: s.tau,
            tau_macro_over_categories: s.tau_macro_over_categories,
            tau_macro_over_prompts: s.tau_macro_over_prompts,
            tokens: s.tokens,
            steps: s.steps,
            samples: s.samples,
            draft_tokens: s.draft_tokens,
            requests_per_second: s.requests_per_second,
            latency_ms: s.latency_ms,
            serving_seconds: s.serving_seconds,
            failures: s.failures,
        })),
    };
    written.comparison = path.join(dir, "comparison.json");
    await writeAtomically(written.comparison, `${JSON.stringify(comparison, null, 2)}\n`);
    const combined = path.join(dir, "report.html");
    await writeAtomically(combined, renderReportHtml(summaries));
    written.reports.unshift(combined);
    return written;
}

/**
 * Names server folders as they come: each call gives a file-system-safe folder name for a server name, unique among
 * the names it gave before (a repeated name gets -2, -3, …).
 */
function serverFolderNamer(): (serverName: string) => string {
    const seen = new Map<string, number>();
    return (name) => {
        const safe = name.replace(/[^A-Za-z0-9_.-]+/g, "_").replace(/^\.+/, "_") || "server";
        const count = (seen.get(safe) ?? 0) + 1;
        seen.set(safe, count);
        return count === 1 ? safe : `${safe}-${count}`;
    };
}

/** Readers never see a half-written file. */
async function writeAtomically(file: string, text: string): Promise<void> {
    const temporary = `${file}.${process.pid}.tmp`;
    await writeFile(temporary, text);
    await rename(temporary, file);
}
