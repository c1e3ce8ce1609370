/**
 * The held-out file of a command's `--data`, read the same way by validate, selfcheck and generate: every invalid line
 * is named on stderr (`FILE:N: rejected: why`), and a file with invalid lines is refused unless `--skip-invalid` says to
 * go on with the valid ones; a file that cannot be read or has no valid conversation is refused always.
 */
import { type HeldOutSet, readHeldOutFile } from "../validate/readHeldOutFile.js";
import type { CommandIo } from "./commandOptions.js";
import { exitCodes } from "./exitCodes.js";

export interface LoadHeldOutOptions {
    /** Keep only the first `limit` valid conversations. Defaults to all of them. */
    limit?: number;
    /** Go on with the valid conversations when some lines are invalid. Defaults to `false`: invalid lines are an error. */
    skipInvalid?: boolean;
}

/** The help text of `--skip-invalid`, the same in every command. */
export const skipInvalidHelp =
    "walk the valid lines of --data even if some are invalid (default: invalid lines are an error)";

/**
 * Reads `file` for `command` (its name in messages, e.g. `validate`). Returns the held-out set, or the exit code to end
 * the command with after the problem was written to `io.err`.
 */
export async function loadHeldOut(
    command: string,
    file: string,
    options: LoadHeldOutOptions,
    io: CommandIo,
): Promise<HeldOutSet | { exitCode: number }> {
    const refuse = (message: string) => {
        io.err.write(`specdraft ${command}: ${message}\n`);
        return { exitCode: exitCodes.usage };
    };
    let heldOut: HeldOutSet;
    try {
        heldOut = await readHeldOutFile(file, { limit: options.limit });
    } catch (error) {
        return refuse(`cannot read --data ${file}: ${(error as Error).message}`);
    }
    for (const line of heldOut.rejected) io.err.write(`${file}:${line.lineNumber}: rejected: ${line.message}\n`);
    const rejected = heldOut.rejected.length;
    if (heldOut.conversations.length === 0)
        return refuse(`${file} has no valid conversations (${rejected} rejected lines)`);
    if (rejected > 0 && options.skipInvalid !== true)
        return refuse(
            `${file} has ${rejected} invalid ${rejected === 1 ? "line" : "lines"} (named above): fix ${rejected === 1 ? "it" : "them"}, or pass --skip-invalid to go on with the ${heldOut.conversations.length} valid conversations`,
        );
    return heldOut;
}
