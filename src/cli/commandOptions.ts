/**
 * What every command shares: commander parsers for numeric options, whose messages name what was expected and what
 * was found, and the streams a command writes to (so tests can run a command in-process and read what it printed).
 */
import { InvalidArgumentError } from "commander";

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

/** A parser accepting numbers > 0 (e.g. seconds, bytes with a fraction). */
export function parsePositiveNumberOption(value: string): number {
    const parsed = Number(value);
    if (value.trim() === "" || !Number.isFinite(parsed) || parsed <= 0)
        throw new InvalidArgumentError(`expected a number > 0, found ${JSON.stringify(value)}.`);
    return parsed;
}

/** Where a command writes: its results to `out`; progress, warnings and errors to `err`. */
export interface CommandIo {
    out: NodeJS.WritableStream;
    err: NodeJS.WritableStream;
}

/** The process's own stdout and stderr: what a command writes to when run from the command line. */
export const processIo: CommandIo = { out: process.stdout, err: process.stderr };
