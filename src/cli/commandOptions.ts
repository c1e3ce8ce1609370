/**
 * What every command shares: commander parsers for numeric options (counts, seconds, bytes), whose messages name what
 * was expected and what was found, and the streams a command writes to (so tests can run a command in-process and read
 * what it printed).
 */
import { writeFile } from "node:fs/promises";
import { InvalidArgumentError } from "commander";
import { GenerateError } from "../generate/types.js";
import { exitCodes } from "./exitCodes.js";

/**
 * A parser accepting integers `min` ≤ n ≤ `max` (`min` defaults to 1, `max` to no bound). The message names the range
 * when there is an upper bound: `expected an integer 0–65535`, else `expected an integer ≥ 1`.
 */
export function parseIntegerOption(min = 1, max = Number.POSITIVE_INFINITY): (value: string) => number {
    const expected = max === Number.POSITIVE_INFINITY ? `an integer ≥ ${min}` : `an integer ${min}–${max}`;
    return (value: string): number => {
        const parsed = Number(value);
        if (!/^[-+]?\d+$/.test(value.trim()) || !Number.isSafeInteger(parsed) || parsed < min || parsed > max)
            throw new InvalidArgumentError(`expected ${expected}, found ${JSON.stringify(value)}.`);
        return parsed;
    };
}

/** A parser accepting fractions 0 ≤ x ≤ 1 (e.g. `0.5`). */
export function parseFractionOption(value: string): number {
    const parsed = Number(value);
    if (value.trim() === "" || !Number.isFinite(parsed) || parsed < 0 || parsed > 1)
        throw new InvalidArgumentError(`expected a fraction 0–1, found ${JSON.stringify(value)}.`);
    return parsed;
}

/** A parser of comma-separated integers ≥ `min` (e.g. `1,2,4,8,16`), each checked as parseIntegerOption checks one. */
export function parseIntegerListOption(min = 1): (value: string) => number[] {
    const one = parseIntegerOption(min);
    return (value: string): number[] => value.split(",").map((part) => one(part.trim()));
}

/** A parser accepting numbers > 0 (e.g. seconds, bytes with a fraction). */
export function parsePositiveNumberOption(value: string): number {
    const parsed = Number(value);
    if (value.trim() === "" || !Number.isFinite(parsed) || parsed <= 0)
        throw new InvalidArgumentError(`expected a number > 0, found ${JSON.stringify(value)}.`);
    return parsed;
}

/** Units a byte count may carry: SI (kB, MB, GB: powers of 1000) and binary (KiB, MiB, GiB: powers of 1024). */
const byteUnits: Readonly<Record<string, number>> = {
    "": 1,
    B: 1,
    kB: 1e3,
    KB: 1e3,
    MB: 1e6,
    GB: 1e9,
    KiB: 2 ** 10,
    MiB: 2 ** 20,
    GiB: 2 ** 30,
};

/**
 * A parser for a whole number of bytes ≥ 1: `1000000000`, `1_000_000_000`, `950MB`, `0.9 GB` or `1GiB`. The
 * message says what was expected: `expected a byte count ≥ 1 such as 1000000000, 950MB or 1GiB, found "1.5B".`
 */
export function parseByteCountOption(value: string): number {
    const [, whole, fraction = "", unitName = ""] =
        /^(\d+(?:_\d+)*)(?:\.(\d+))?\s*([A-Za-z]*)$/.exec(value.trim()) ?? [];
    const unit = byteUnits[unitName];
    let bytes = Number.NaN;
    if (whole !== undefined && unit !== undefined) {
        // exact decimal arithmetic: 0.3GB is 300000000 bytes, not 300000000.00000006
        const scaled = BigInt(whole.replace(/_/g, "") + fraction) * BigInt(unit);
        const divisor = 10n ** BigInt(fraction.length);
        if (scaled % divisor === 0n) bytes = Number(scaled / divisor);
    }
    if (!Number.isSafeInteger(bytes) || bytes < 1)
        throw new InvalidArgumentError(
            `expected a byte count ≥ 1 such as 1000000000, 950MB or 1GiB, found ${JSON.stringify(value)}.`,
        );
    return bytes;
}

/** Where a command writes: its results to `out`; progress, warnings and errors to `err`. */
export interface CommandIo {
    out: NodeJS.WritableStream;
    err: NodeJS.WritableStream;
}

/** The process's own stdout and stderr: what a command writes to when run from the command line. */
export const processIo: CommandIo = { out: process.stdout, err: process.stderr };

/** A command's failure: one line `specdraft COMMAND: message` on `io.err`, and its exit code (usage by default). */
export function commandFailure(
    command: string,
    io: CommandIo,
): (message: string, exitCode?: number) => { exitCode: number } {
    return (message, exitCode = exitCodes.usage) => {
        io.err.write(`specdraft ${command}: ${message}\n`);
        return { exitCode };
    };
}

/** The exit code of an error thrown while loading or generating: a vocabulary mismatch, bad input, or a failure. */
export function generateErrorExitCode(error: unknown): number {
    if (!(error instanceof GenerateError)) return exitCodes.failed;
    return error.code === "vocab_mismatch" ? exitCodes.vocabMismatch : exitCodes.usage;
}

/** A command's result as JSON at `path` (`--out`, `--json`), said on `io.out`. */
export async function writeJsonResult(path: string, value: unknown, io: CommandIo): Promise<void> {
    await writeFile(path, `${JSON.stringify(value, null, 2)}\n`);
    io.out.write(`wrote ${path}\n`);
}
