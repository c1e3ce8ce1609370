/**
 * `specdraft validate`: walks held-out conversations against one or more draft servers and reports τ (mean acceptance
 * length) side by side, optionally as summary.json + report.html. A server is checked first (src/validate/checkServer.ts:
 * there, the data's vocabulary, every conversation within its context), and a run whose draft requests failed fails.
 */
import cliProgress from "cli-progress";
import { Command } from "commander";
import { createDraftClient, defaultTimeoutMs } from "../client/createDraftClient.js";
import type { DraftClient } from "../client/types.js";
import { defaultDraftLength } from "../engine/engineDefaults.js";
import { checkServer, readDataVocabulary, type ServerProblem } from "../validate/checkServer.js";
import { formatComparisonTable } from "../validate/formatComparisonTable.js";
import { summarizeWalk } from "../validate/summarizeWalk.js";
import type { WalkSummary } from "../validate/types.js";
import { defaultConcurrency, walkHeldOut } from "../validate/walkHeldOut.js";
import { writeReport } from "../validate/writeReport.js";
import { type CommandIo, parseIntegerOption, processIo } from "./commandOptions.js";
import { type ExitCode, exitCodes } from "./exitCodes.js";
import { loadHeldOut, skipInvalidHelp } from "./loadHeldOut.js";

/** The command's options, as commander hands them over. */
export interface ValidateOptions {
    /** `[NAME=]URL` or `[NAME=]llama-server+URL`, one per server. */
    server: string[];
    /** Held-out JSONL file. */
    data: string;
    /** Conversations walked at once. Defaults to `32`. */
    concurrency?: number;
    /** Draft tokens per request (k). Defaults to `16`. */
    draftLen?: number;
    /** Per-request timeout. Defaults to `30000` ms. */
    timeoutMs?: number;
    /** Walk only the first N valid conversations. Defaults to all. */
    limit?: number;
    /** Walk the valid conversations even if some lines are invalid. Defaults to `false` (invalid lines: exit 2). */
    skipInvalid?: boolean;
    /** Folder for summary.json and report.html. Defaults to none (table only). */
    report?: string;
    /** Draw progress bars (on stderr). Defaults to `true`. */
    progress?: boolean;
}

/** The exit code of each reason not to walk a server. */
const problemExitCodes: Record<ServerProblem["kind"], ExitCode> = {
    unreachable: exitCodes.failed,
    vocabulary: exitCodes.vocabMismatch,
    context: exitCodes.usage,
};

/** Runs the command; returns the summaries (one per server, in order) and the exit code. */
export async function runValidate(
    options: ValidateOptions,
    io: CommandIo = processIo,
): Promise<{ exitCode: number; summaries: WalkSummary[] }> {
    const timeoutMs = options.timeoutMs ?? defaultTimeoutMs;
    let clients: DraftClient[];
    try {
        if (options.server.length === 0) throw new Error("--server: expected at least one draft server URL");
        clients = options.server.map((spec) => createDraftClient(spec, timeoutMs));
    } catch (error) {
        io.err.write(`specdraft validate: ${(error as Error).message}\n`);
        return { exitCode: exitCodes.usage, summaries: [] };
    }

    const heldOut = await loadHeldOut("validate", options.data, options, io);
    if ("exitCode" in heldOut) return { exitCode: heldOut.exitCode, summaries: [] };

    const draftLength = options.draftLen ?? defaultDraftLength;
    const data = { file: options.data, vocabulary: await readDataVocabulary(options.data) };
    for (const client of clients) {
        const { problem, notes } = await checkServer(client, heldOut.conversations, draftLength, data);
        for (const note of notes) io.err.write(`${note}\n`);
        if (problem !== undefined) {
            io.err.write(`specdraft validate: ${problem.message}\n`);
            return { exitCode: problemExitCodes[problem.kind], summaries: [] };
        }
    }

    const totalTokens = heldOut.conversations.reduce((sum, c) => sum + c.continuationTokens.length, 0);
    const nameWidth = Math.max(...clients.map((c) => c.name.length));
    const bars = new cliProgress.MultiBar(
        {
            stream: io.err,
            format: "{server} [{bar}] {percentage}% | {value}/{total} tokens | {steps} steps | τ {tau} | {failures} failures | {duration_formatted}",
            hideCursor: true,
            clearOnComplete: false,
        },
        cliProgress.Presets.shades_classic,
    );
    const showBars = options.progress !== false && (io.err as { isTTY?: boolean }).isTTY === true;
    const summaries: WalkSummary[] = [];
    try {
        // servers one after another, so one server's load never slows the other's latency figures
        for (const client of clients) {
            // cli-progress draws nothing useful without a terminal: a plain line says what is happening instead
            if (!showBars && options.progress !== false)
                io.err.write(
                    `walking ${heldOut.conversations.length} conversations (${totalTokens} tokens) against ${client.name} (${client.url})…\n`,
                );
            const bar = showBars
                ? bars.create(totalTokens, 0, {
                      server: client.name.padEnd(nameWidth),
                      steps: 0,
                      tau: "–",
                      failures: 0,
                  })
                : undefined;
            let tokens = 0;
            let steps = 0;
            let failures = 0;
            const result = await walkHeldOut(heldOut.conversations, client, {
                draftLength,
                concurrency: options.concurrency ?? defaultConcurrency,
                onProgress: (advanced, failure) => {
                    tokens += advanced;
                    steps++;
                    if (failure) failures++;
                    bar?.update(tokens, { steps, tau: (tokens / steps).toFixed(3), failures });
                },
            });
            summaries.push(
                summarizeWalk(result, { data: { file: options.data, rejectedLines: heldOut.rejected.length } }),
            );
        }
    } finally {
        if (showBars) bars.stop();
    }

    io.out.write(`\n${formatComparisonTable(summaries)}\n`);
    // a failed request is scored as an empty draft, so τ would understate the drafter without a word: the run fails
    const failing = summaries.filter((summary) => summary.failures.total > 0);
    for (const summary of failing)
        io.err.write(
            `specdraft validate: ${summary.server.name}: ${summary.failures.total} draft requests failed and were scored as empty drafts ` +
                `(timeout ${summary.failures.timeout}, http ${summary.failures.http}, network ${summary.failures.network}, malformed ${summary.failures.malformed}): ` +
                "τ does not measure the drafter\n",
        );
    if (options.report !== undefined) {
        const written = await writeReport(options.report, summaries);
        for (const file of [
            ...written.summaries,
            ...(written.comparison ? [written.comparison] : []),
            ...written.reports,
        ])
            io.out.write(`wrote ${file}\n`);
    }
    return { exitCode: failing.length > 0 ? exitCodes.failed : exitCodes.ok, summaries };
}

/** The commander command, for src/cli/main.ts: `program.addCommand(validateCommand())`. */
export function validateCommand(): Command {
    return new Command("validate")
        .description("Walk held-out conversations against draft servers and report τ, the mean acceptance length.")
        .requiredOption(
            "--server <url>",
            "draft server, [NAME=]http://host:port (specdraft /draft) or [NAME=]llama-server+http://host:port; repeat to compare",
            (value: string, previous: string[] | undefined) => [...(previous ?? []), value],
        )
        .requiredOption(
            "--data <file.jsonl>",
            'held-out JSONL: {"id", "category"?, "prompt_tokens", "continuation_tokens"} per line',
        )
        .option("--concurrency <n>", "conversations walked at once", parseIntegerOption(1), defaultConcurrency)
        .option("--draft-len <k>", "draft tokens asked for per request", parseIntegerOption(1), defaultDraftLength)
        .option(
            "--timeout-ms <ms>",
            "per-request timeout; a late answer counts as a failure",
            parseIntegerOption(1),
            defaultTimeoutMs,
        )
        .option("--limit <n>", "walk only the first N valid conversations", parseIntegerOption(1))
        .option("--skip-invalid", skipInvalidHelp)
        .option("--report <dir>", "write summary.json and report.html (per server, plus a comparison) to this folder")
        .option("--no-progress", "no progress bars")
        .action(async (options: ValidateOptions) => {
            const { exitCode } = await runValidate(options);
            process.exitCode = exitCode;
        });
}
