/** commander argument parsers for integer options, with messages that name the option and what was found. */
import { InvalidArgumentError } from "commander";

/** A parser accepting integers ≥ `min` (default 1). */
export function parseIntegerOption(min = 1): (value: string) => number {
    return (value: string): number => {
        const parsed = Number(value);
        if (!/^[-+]?\d+$/.test(value.trim()) || !Number.isSafeInteger(parsed) || parsed < min)
            throw new InvalidArgumentError(`expected an integer ≥ ${min}, found ${JSON.stringify(value)}.`);
        return parsed;
    };
}

/** A parser accepting numbers > 0 (e.g. seconds, bytes with a fraction). */
export function parsePositiveNumberOption(value: string): number {
    const parsed = Number(value);
    if (value.trim() === "" || !Number.isFinite(parsed) || parsed <= 0) throw new InvalidArgumentError(`expected a number > 0, found ${JSON.stringify(value)}.`);
    return parsed;
}
