/**
 * `specdraft speedup`: what speed-up a target and a drafter give on this machine. Measures the target's cost per token
 * alone and of verifying k + 1 tokens, and the drafter's draft of k, as `specdraft generate --draft-model` runs them;
 * takes τ(k) from the evaluation's file; prints the projected speed-up per k, the best k and the command lines that use
 * it.
 */
import { access } from "node:fs/promises";
import cliProgress from "cli-progress";
import { Command, Option } from "commander";
import { defaultGpu, gpuChoices } from "../engine/engineDefaults.js";
import type { GpuChoice } from "../engine/types.js";
import { defaultMaxTokens } from "../generate/runGenerate.js";
import { readTauFile, TauFileError } from "../speedup/readTauFile.js";
import {
    defaultPromptTokens,
    defaultSpeedUpDraftLengths,
    defaultSpeedUpRepeats,
    formatSpeedUpReport,
    runSpeedUp,
    type SpeedUpReport,
} from "../speedup/runSpeedUp.js";
import type { Conversation } from "../validate/types.js";
import {
    type CommandIo,
    commandFailure,
    generateErrorExitCode,
    parseIntegerListOption,
    parseIntegerOption,
    processIo,
    writeJsonResult,
} from "./commandOptions.js";
import { exitCodes } from "./exitCodes.js";
import { loadHeldOut, skipInvalidHelp } from "./loadHeldOut.js";

/** The command's options, as commander hands them over (defaults applied). */
export interface SpeedupCommandOptions {
    target: string;
    draftModel: string;
    /** The τ file (readTauFile.ts). */
    tau: string;
    /** `--k`: the draft lengths to project. */
    k?: number[];
    gpu?: GpuChoice;
    threads?: number;
    promptTokens?: number;
    maxTokens?: number;
    repeats?: number;
    /** Held-out JSONL whose conversations the drafts are timed along. Defaults to none: a synthetic text. */
    data?: string;
    skipInvalid?: boolean;
    /** Also time the drafts without prompt-lookup candidates and keep the faster (RunSpeedUpOptions). */
    compareLookahead?: boolean;
    /** Write the whole report as JSON here. Defaults to none. */
    json?: string;
    /** Defaults to `true`. */
    progress?: boolean;
}

/** Runs the command; returns the exit code and, when it measured, the report. */
export async function runSpeedupCommand(
    options: SpeedupCommandOptions,
    io: CommandIo = processIo,
): Promise<{ exitCode: number; report?: SpeedUpReport }> {
    const fail = commandFailure("speedup", io);
    for (const [flag, file] of [
        ["--target", options.target],
        ["--draft-model", options.draftModel],
    ] as const) {
        const readable = await access(file).then(
            () => true,
            () => false,
        );
        if (!readable) return fail(`${flag}: cannot read ${file}`);
    }
    const draftLengths = options.k ?? defaultSpeedUpDraftLengths;
    let tau: Awaited<ReturnType<typeof readTauFile>>;
    try {
        tau = await readTauFile(options.tau, draftLengths);
    } catch (error) {
        if (error instanceof TauFileError || error instanceof RangeError) return fail(error.message);
        throw error;
    }

    let conversations: Conversation[] | undefined;
    if (options.data !== undefined) {
        const heldOut = await loadHeldOut("speedup", options.data, options, io);
        if ("exitCode" in heldOut) return heldOut;
        conversations = heldOut.conversations;
    }

    const bar =
        options.progress === false
            ? undefined
            : new cliProgress.SingleBar(
                  {
                      stream: io.err,
                      format: "speedup [{bar}] {value}/{total} figures | {duration_formatted}",
                      hideCursor: true,
                  },
                  cliProgress.Presets.shades_classic,
              );
    let report: SpeedUpReport;
    try {
        bar?.start(1, 0);
        report = await runSpeedUp({
            target: options.target,
            draftModel: options.draftModel,
            tau,
            tauFile: options.tau,
            draftLengths,
            gpu: options.gpu,
            threads: options.threads,
            promptTokens: options.promptTokens,
            maxTokens: options.maxTokens,
            repeats: options.repeats,
            conversations,
            compareLookahead: options.compareLookahead,
            onProgress: (done, total) => {
                bar?.setTotal(total);
                bar?.update(done);
            },
        });
    } catch (error) {
        bar?.stop();
        return fail((error as Error).message, generateErrorExitCode(error));
    }
    bar?.stop();

    io.out.write(`${formatSpeedUpReport(report)}\n`);
    if (options.json !== undefined) await writeJsonResult(options.json, report, io);
    return { exitCode: exitCodes.ok, report };
}

/** The commander command, for src/cli/program.ts. */
export function speedupCommand(): Command {
    return new Command("speedup")
        .description(
            "What speed-up to expect on this machine: the target's verify cost for k + 1 tokens and the drafter's draft " +
                "of k measured here, τ(k) from the evaluation, the projected speed-up per k, the best k and the " +
                "specdraft serve / llama-server lines that use it.",
        )
        .requiredOption("--target <file.gguf>", "target model")
        .requiredOption("--draft-model <file.gguf>", "draft model (the target's vocabulary)")
        .requiredOption(
            "--tau <file.json>",
            'τ by draft length from the evaluation: {"tau_by_k": {"1": 1.8, "2": 2.4, …}} or {"tau": 4.6, "k": 16}',
        )
        .option(
            "--k <list>",
            "draft lengths to project, comma-separated (a k the τ file lacks: derived from its largest k's τ)",
            parseIntegerListOption(1),
            [...defaultSpeedUpDraftLengths],
        )
        .addOption(new Option("--gpu <where>", "where llama.cpp computes").choices(gpuChoices).default(defaultGpu))
        .option(
            "--threads <n>",
            "CPU threads per llama.cpp context (default: the CPUs less one, 1 to 8)",
            parseIntegerOption(1),
        )
        .option(
            "--prompt-tokens <n>",
            "prompt length the costs are measured after and the projection starts from",
            parseIntegerOption(1),
            defaultPromptTokens,
        )
        .option(
            "--max-tokens <n>",
            "tokens of the generation projected (as generate's --max-tokens)",
            parseIntegerOption(1),
            defaultMaxTokens,
        )
        .option("--repeats <n>", "timed calls per figure", parseIntegerOption(1), defaultSpeedUpRepeats)
        .option(
            "--data <file.jsonl>",
            "held-out JSONL (validate's format) whose conversations the drafts are timed along, as a generation " +
                "drafts on them (default: a synthetic text without repeats, where prompt lookup finds nothing)",
        )
        .option("--skip-invalid", skipInvalidHelp)
        .option(
            "--compare-lookahead",
            "also time the drafts without prompt-lookup candidates (--lookahead 0) where serve's default checks some, " +
                "and project with the faster (its serve line says --lookahead 0 where that won)",
        )
        .option("--json <file.json>", "write the whole report as JSON here")
        .option("--no-progress", "no progress bar")
        .action(async (options: SpeedupCommandOptions) => {
            const { exitCode } = await runSpeedupCommand(options);
            process.exitCode = exitCode;
        });
}
