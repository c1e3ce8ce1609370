/**
 * The draft engine's tuning options (EngineTuning) on the command line: `specdraft serve` takes them, and the benches
 * that load an engine in process take the same flags, so one measurement's settings read the same for both.
 */
import { type Command, Option } from "commander";
import type { EngineTuning } from "../engine/EngineTuning.js";
import {
    defaultGpuPadBatch,
    defaultGpuStepPrefill,
    defaultLookahead,
    kvTypes,
    maxLookahead,
} from "../engine/engineDefaults.js";
import type { KvType } from "../engine/types.js";
import { parseFractionOption, parseIntegerOption } from "./commandOptions.js";

/** `on` or `off`: a setting whose default depends on the backend, so a bare flag could not turn it off. */
const onOff = ["on", "off"] as const;
type OnOff = (typeof onOff)[number];

/** What commander hands the action for the options addEngineTuningOptions adds. */
export interface EngineTuningFlags {
    lookahead?: number;
    lookaheadStepTokens?: number;
    lookaheadFill?: OnOff;
    kvType?: KvType;
    flashAttention?: OnOff;
    padBatch?: number;
    stepPrefill?: number;
}

/** Adds --lookahead, --lookahead-step-tokens, --lookahead-fill, --kv-type, --flash-attention, --pad-batch, --step-prefill. */
export function addEngineTuningOptions(command: Command): Command {
    const { cpu, gpu } = defaultLookahead;
    return command
        .option(
            "--lookahead <n>",
            `prompt-lookup candidates each drafter step checks per request, 0–${maxLookahead} (0: off; the ` +
                `drafter's greedy drafts either way; default: ${cpu.candidates} on the CPU, ${gpu.candidates} on a GPU)`,
            parseIntegerOption(0, maxLookahead),
        )
        .option(
            "--lookahead-step-tokens <n>",
            "a step's token budget the candidates share: each of S requests in a step gets up to this ÷ S − 1 " +
                `(default: ${cpu.stepTokens} on the CPU, ${gpu.stepTokens} on a GPU)`,
            parseIntegerOption(1, 1 << 20),
        )
        .addOption(
            new Option(
                "--lookahead-fill <on|off>",
                "decode every step's candidate positions even without guesses, so steps keep one shape " +
                    `(default: ${cpu.fill ? "on" : "off"} on the CPU, ${gpu.fill ? "on" : "off"} on a GPU)`,
            ).choices(onOff),
        )
        .addOption(
            new Option(
                "--kv-type <type>",
                "KV cache element type; q8_0 halves what long contexts read per step (needs flash attention and a head " +
                    "size divisible by 32) (default: f16)",
            ).choices(kvTypes),
        )
        .addOption(
            new Option(
                "--flash-attention <on|off>",
                "flash attention (default: on on a GPU; off on the CPU, where it makes batched drafts differ from drafts alone)",
            ).choices(onOff),
        )
        .option(
            "--pad-batch <fraction>",
            "pad decode steps to all streams when at least this fraction of them drafts, so steps keep one shape " +
                `(0: never; default: ${defaultGpuPadBatch} on a GPU, 0 on the CPU)`,
            parseFractionOption,
        )
        .option(
            "--step-prefill <tokens>",
            "feed requests bringing 2 to this many new tokens one token per step, so steps keep one shape " +
                `(0: never; default: ${defaultGpuStepPrefill} on a GPU, 0 on the CPU)`,
            parseIntegerOption(0, 1 << 20),
        );
}

/** The EngineTuning the flags ask for; options not given stay undefined (loadEngine's backend defaults). */
export function engineTuningOf(flags: EngineTuningFlags): EngineTuning {
    const onOrOff = (value: OnOff | undefined) => (value === undefined ? undefined : value === "on");
    return {
        lookahead: flags.lookahead,
        lookaheadStepTokens: flags.lookaheadStepTokens,
        lookaheadFill: onOrOff(flags.lookaheadFill),
        kvType: flags.kvType,
        flashAttention: onOrOff(flags.flashAttention),
        padBatch: flags.padBatch,
        stepPrefill: flags.stepPrefill,
    };
}
