import cliProgress from "cli-progress";
import { Command, Option } from "commander";
import { defaultGenerateTimeoutMs } from "../client/createDraftClient.js";
import {
    defaultDraftLength,
    defaultGpu,
    defaultLookahead,
    gpuChoices,
    maxLookahead,
} from "../engine/engineDefaults.js";
import type { DraftSourceSpec } from "../generate/openDraftSource.js";
import {
    defaultMaxTokens,
    defaultRuns,
    defaultWarmup,
    type GeneratePrompt,
    type RunGenerateOptions,
    runGenerate,
} from "../generate/runGenerate.js";
import { formatGenerateReport, judgeDifferences } from "../generate/summarizeGeneration.js";
import type { GenerateSummary } from "../generate/types.js";
import {
    type CommandIo,
    commandFailure,
    generateErrorExitCode,
    parseIntegerOption,
    processIo,
    writeJsonResult,
} from "./commandOptions.js";
import { exitCodes } from "./exitCodes.js";
import { loadHeldOut, skipInvalidHelp } from "./loadHeldOut.js";

/**
 * The command's options, as commander hands them over: runGenerate's own under their names (commander applies the
 * defaults `--help` shows), and the flags that say where prompts and drafts come from and where the summary goes.
 */
export interface GenerateCommandOptions
    extends Pick<
        RunGenerateOptions,
        "target" | "maxTokens" | "runs" | "warmup" | "gpu" | "threads" | "timeoutMs" | "draftLookahead"
    > {
    /** A specdraft server's root URL. */
    drafter?: string;
    /** An in-process draft GGUF. */
    draftModel?: string;
    /** `ngram`: prompt lookup, no model. */
    draft?: string;
    /** Text to tokenize with the target's tokenizer. */
    prompt?: string;
    /** Validator JSONL; `prompt_tokens` of each line are the prompts. */
    data?: string;
    /** Use only the first N valid lines of `--data`. Defaults to all. */
    limit?: number;
    /** Use the valid lines of `--data` even if some are invalid. Defaults to `false` (invalid lines: exit 2). */
    skipInvalid?: boolean;
    /** `--draft-len`: runGenerate's draftLength. */
    draftLen?: RunGenerateOptions["draftLength"];
    /** `--context`: runGenerate's contextSize. */
    context?: RunGenerateOptions["contextSize"];
    /** JSON summary file. Defaults to none. */
    out?: string;
    /** Defaults to `true`. */
    progress?: boolean;
}

/**
 * What generates the summary: runGenerate, or a stand-in taking the same options (bench/libraryVerifiers.ts runs
 * node-llama-cpp's verifiers behind the same flags, table and exit codes).
 */
export type Generate = (options: RunGenerateOptions) => Promise<GenerateSummary<string>>;

/** Runs the command; returns the exit code and, when generation ran, the summary. */
export async function runGenerateCommand(
    options: GenerateCommandOptions,
    io: CommandIo = processIo,
    generate: Generate = runGenerate,
): Promise<{ exitCode: number; summary?: GenerateSummary<string> }> {
    const fail = commandFailure("generate", io);

    const sources = [options.drafter, options.draftModel, options.draft].filter((value) => value !== undefined);
    if (sources.length !== 1)
        return fail(
            `expected exactly one of --drafter URL, --draft-model FILE.gguf, --draft ngram; found ${sources.length}`,
        );
    let draft: DraftSourceSpec;
    if (options.drafter !== undefined) draft = { kind: "http", url: options.drafter };
    else if (options.draftModel !== undefined) draft = { kind: "model", path: options.draftModel };
    else if (options.draft === "ngram") draft = { kind: "ngram" };
    else return fail(`--draft: expected "ngram", found ${JSON.stringify(options.draft)}`);

    let prompts: GeneratePrompt[];
    if (options.prompt !== undefined && options.data === undefined) {
        if (options.prompt.length === 0) return fail("--prompt: expected some text, found an empty string");
        prompts = [{ id: "prompt", tokens: { text: options.prompt } }];
    } else if (options.data !== undefined && options.prompt === undefined) {
        const heldOut = await loadHeldOut("generate", options.data, options, io);
        if ("exitCode" in heldOut) return heldOut;
        prompts = heldOut.conversations.map((c) => ({ id: c.id, category: c.category, tokens: c.promptTokens }));
    } else return fail("expected exactly one of --prompt TEXT, --data FILE.jsonl");

    const runs = options.runs ?? defaultRuns;
    const bar =
        options.progress === false
            ? undefined
            : new cliProgress.SingleBar(
                  {
                      stream: io.err,
                      format: "generate [{bar}] {value}/{total} generations | {duration_formatted}",
                      hideCursor: true,
                  },
                  cliProgress.Presets.shades_classic,
              );
    let summary: GenerateSummary<string>;
    try {
        bar?.start(prompts.length * runs * 2, 0);
        summary = await generate({
            target: options.target,
            draft,
            prompts,
            maxTokens: options.maxTokens,
            warmup: options.warmup,
            draftLength: options.draftLen,
            runs,
            gpu: options.gpu,
            threads: options.threads,
            contextSize: options.context,
            timeoutMs: options.timeoutMs,
            draftLookahead: options.draftLookahead,
            onWarning: (message) => {
                // keep the bar's line intact: warnings go on their own line
                if (bar) io.err.write("\n");
                io.err.write(`warning: ${message}\n`);
            },
            onProgress: (done) => bar?.update(done),
        });
    } catch (error) {
        bar?.stop();
        return fail((error as Error).message, generateErrorExitCode(error));
    }
    bar?.stop();

    io.out.write(`${formatGenerateReport(summary)}\n`);
    if (options.out !== undefined) await writeJsonResult(options.out, summary, io);
    const { warnings, failure } = judgeDifferences(summary);
    for (const warning of warnings) io.err.write(`specdraft generate: ${warning}\n`);
    if (failure !== undefined) {
        io.err.write(`specdraft generate: ${failure}\n`);
        return { exitCode: exitCodes.failed, summary };
    }
    return { exitCode: exitCodes.ok, summary };
}

/**
 * The commander command, for src/cli/main.ts: `program.addCommand(generateCommand())`; `generate` replaces
 * runGenerate behind the same flags (bench/libraryVerifiers.ts).
 */
export function generateCommand(generate: Generate = runGenerate): Command {
    return new Command("generate")
        .description(
            "Generate greedily with the target alone and with drafts, side by side: tokens/s, speed-up, τ, draft time share; " +
                "fails if the outputs differ (but where the target's own logits nearly tie: a warning).",
        )
        .requiredOption("--target <file.gguf>", "target model")
        .option("--drafter <url>", "specdraft server, e.g. http://127.0.0.1:8000 (drafts from POST /draft)")
        .option("--draft-model <file.gguf>", "draft model loaded in this process")
        .option("--draft <kind>", 'draft without a model: "ngram" (prompt lookup)')
        .option("--prompt <text>", "prompt text, tokenized with the target's tokenizer")
        .option(
            "--data <file.jsonl>",
            'validator JSONL ({"id", "category"?, "prompt_tokens", ...} per line): each prompt_tokens is a prompt',
        )
        .option("--limit <n>", "use only the first N valid lines of --data", parseIntegerOption(1))
        .option("--skip-invalid", skipInvalidHelp)
        .option("--max-tokens <n>", "tokens generated per prompt", parseIntegerOption(1), defaultMaxTokens)
        .option("--draft-len <k>", "draft tokens per target step", parseIntegerOption(1), defaultDraftLength)
        .option("--runs <n>", "generations per prompt and mode", parseIntegerOption(1), defaultRuns)
        .option(
            "--warmup <n>",
            "untimed generations of the first prompt per mode before timing (0: none)",
            parseIntegerOption(0),
            defaultWarmup,
        )
        .option("--out <file.json>", "write the JSON summary here")
        .addOption(new Option("--gpu <where>", "where llama.cpp computes").choices(gpuChoices).default(defaultGpu))
        .option(
            "--threads <n>",
            "CPU threads per llama.cpp context (default: the CPUs less one, 1 to 8)",
            parseIntegerOption(1),
        )
        .option(
            "--context <tokens>",
            "tokens the target's sequence holds (default: longest prompt + max tokens + draft length + 8)",
            parseIntegerOption(2),
        )
        .option(
            "--timeout-ms <ms>",
            "per-request timeout of the drafter server",
            parseIntegerOption(1),
            defaultGenerateTimeoutMs,
        )
        .option(
            "--draft-lookahead <n>",
            `with --draft-model: prompt-lookup candidates each drafter step checks, 0–${maxLookahead} ` +
                `(0: off; the drafter's greedy drafts either way; default: the draft engine's, ${defaultLookahead.cpu.candidates} on the CPU, ` +
                `${defaultLookahead.gpu.candidates} on a GPU)`,
            parseIntegerOption(0, maxLookahead),
        )
        .option("--no-progress", "no progress bar")
        .action(async (options: GenerateCommandOptions) => {
            const { exitCode } = await runGenerateCommand(options, processIo, generate);
            process.exitCode = exitCode;
        });
}
