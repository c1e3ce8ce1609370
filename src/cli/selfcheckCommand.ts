/**
 * `specdraft selfcheck DIR --data FILE.jsonl`: runs a packed drafter folder as a grader would and prints each gate
 * ✓/✗ with its figure; exits 1 if any gate fails, 2 on bad arguments.
 */
import cliProgress from "cli-progress";
import { Command } from "commander";
import { defaultTimeoutMs } from "../client/createDraftClient.js";
import { defaultMaxFolderBytes } from "../pack/drafterFolder.js";
import { runSelfcheck } from "../selfcheck/runSelfcheck.js";
import {
    defaultBudgetSeconds,
    defaultMaxFailures,
    defaultSampleConversations,
    defaultStartupTimeoutSeconds,
    defaultWindowsPerConversation,
    defaultWindowTokens,
    gateNames,
    type SelfcheckOptions,
} from "../selfcheck/types.js";
import { defaultConcurrency } from "../validate/walkHeldOut.js";
import {
    type CommandIo,
    parseByteCountOption,
    parseIntegerOption,
    parsePositiveNumberOption,
    processIo,
} from "./commandOptions.js";
import { exitCodes } from "./exitCodes.js";
import { loadHeldOut, skipInvalidHelp } from "./loadHeldOut.js";

/** Runs the command; returns the exit code. */
export async function runSelfcheckCommand(
    options: SelfcheckOptions & { progress?: boolean; skipInvalid?: boolean },
    io: CommandIo = processIo,
): Promise<number> {
    const heldOut = await loadHeldOut("selfcheck", options.data, options, io);
    if ("exitCode" in heldOut) return heldOut.exitCode;

    io.out.write(
        `specdraft selfcheck ${options.dir} (${heldOut.conversations.length} held-out conversations${options.cleanEnv ? ", clean environment" : ""})\n`,
    );
    const width = Math.max(...gateNames.map((name) => name.length));
    let bar: cliProgress.SingleBar | undefined;
    let failures = 0;
    const result = await runSelfcheck(options, heldOut, {
        onGate: (gate) => io.out.write(`${gate.ok ? "✓" : "✗"} ${gate.name.padEnd(width)}  ${gate.figure}\n`),
        onWalkStart: (tokens, sampled) => {
            if (options.progress === false) return;
            if ((io.err as { isTTY?: boolean }).isTTY !== true) {
                io.err.write(`walking ${sampled ? "the sample" : "all conversations"} (${tokens} tokens)…\n`);
                return;
            }
            bar = new cliProgress.SingleBar(
                {
                    stream: io.err,
                    format: `walking ${sampled ? "sample" : "all"} [{bar}] {percentage}% | {value}/{total} tokens | {failures} failures | {duration_formatted}`,
                    hideCursor: true,
                },
                cliProgress.Presets.shades_classic,
            );
            bar.start(tokens, 0, { failures: 0 });
        },
        onWalkProgress: (advanced, failure) => {
            if (failure) failures++;
            bar?.increment(advanced, { failures });
        },
        onWalkEnd: () => bar?.stop(),
    });
    const failed = result.gates.filter((g) => !g.ok).map((g) => g.name);
    io.out.write(
        failed.length === 0
            ? `all ${result.gates.length} gates passed\n`
            : `${failed.length} of ${result.gates.length} gates failed: ${failed.join(", ")}\n`,
    );
    return failed.length === 0 ? exitCodes.ok : exitCodes.failed;
}

/** The commander command, for src/cli/main.ts: `program.addCommand(selfcheckCommand())`. */
export function selfcheckCommand(): Command {
    return new Command("selfcheck")
        .description(
            "Run a packed drafter folder as a grader would and check each gate: prerequisites, size, startup, smoke, serving time, failures, health.",
        )
        .argument("<dir>", "the drafter folder (from specdraft pack)")
        .requiredOption("--data <file.jsonl>", "held-out JSONL walked for the serving-time gate")
        .option(
            "--max-bytes <bytes>",
            "largest folder, every byte counted (e.g. 1000000000, 950MB, 1GiB)",
            parseByteCountOption,
            defaultMaxFolderBytes,
        )
        .option(
            "--clean-env",
            "start serve.sh from a copy of the folder with no node on PATH (only bash, tar, xz, mkdir, mktemp, mv, rm), " +
                "an empty HOME and nothing else of this environment: what a bundled folder (pack --bundle) must pass",
            false,
        )
        .option(
            "--startup-timeout <s>",
            "seconds until GET /health must answer 200",
            parsePositiveNumberOption,
            defaultStartupTimeoutSeconds,
        )
        .option(
            "--budget <s>",
            "serving seconds allowed for the whole held-out set",
            parsePositiveNumberOption,
            defaultBudgetSeconds,
        )
        .option("--full", "walk the whole set instead of projecting the serving time from a sample", false)
        .option(
            "--sample-conversations <n>",
            "sample: the first N conversations",
            parseIntegerOption(1),
            defaultSampleConversations,
        )
        .option("--window <tokens>", "sample: tokens per window", parseIntegerOption(1), defaultWindowTokens)
        .option(
            "--windows-per-conversation <n>",
            "sample: windows per conversation at most",
            parseIntegerOption(1),
            defaultWindowsPerConversation,
        )
        .option("--concurrency <n>", "conversations walked at once", parseIntegerOption(1), defaultConcurrency)
        .option("--draft-len <k>", "draft length (default: architecture.json's draft_length)", parseIntegerOption(1))
        .option(
            "--timeout-ms <ms>",
            "per-request timeout; a late answer counts as a failure",
            parseIntegerOption(1),
            defaultTimeoutMs,
        )
        .option("--max-failures <n>", "failed draft requests allowed", parseIntegerOption(0), defaultMaxFailures)
        .option("--skip-invalid", skipInvalidHelp)
        .option("--no-progress", "no progress bar")
        .action(
            async (
                dir: string,
                flags: Omit<SelfcheckOptions, "dir"> & {
                    startupTimeout: number;
                    budget: number;
                    window: number;
                    draftLen?: number;
                    progress: boolean;
                    skipInvalid?: boolean;
                    cleanEnv: boolean;
                },
            ) => {
                process.exitCode = await runSelfcheckCommand({
                    dir,
                    data: flags.data,
                    maxBytes: flags.maxBytes,
                    startupTimeoutSeconds: flags.startupTimeout,
                    budgetSeconds: flags.budget,
                    full: flags.full,
                    sampleConversations: flags.sampleConversations,
                    windowTokens: flags.window,
                    windowsPerConversation: flags.windowsPerConversation,
                    concurrency: flags.concurrency,
                    draftLength: flags.draftLen,
                    timeoutMs: flags.timeoutMs,
                    maxFailures: flags.maxFailures,
                    cleanEnv: flags.cleanEnv,
                    progress: flags.progress,
                    skipInvalid: flags.skipInvalid,
                });
            },
        );
}
