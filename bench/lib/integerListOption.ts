/** The benches' own option parser: what only they take (lists of sizes, draft lengths, candidates). */
import { parseIntegerOption } from "../../src/cli/commandOptions.js";

/** A parser of comma-separated integers ≥ `min` (e.g. `0,1,4`), each checked as parseIntegerOption checks one. */
export function parseIntegerListOption(min = 1): (value: string) => number[] {
    const one = parseIntegerOption(min);
    return (value: string): number[] => value.split(",").map((part) => one(part.trim()));
}
