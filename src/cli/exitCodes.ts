/**
 * The exit codes of every specdraft command, one meaning each: the same condition gives the same code in every command.
 * docs/cli.md documents the table (test/cli/exitCodes.test.ts checks that the two agree).
 */

export const exitCodes = {
    /** Done; what the command checks passed. */
    ok: 0,
    /**
     * The command ran and failed: what it checks did not pass (a selfcheck gate, speculative output that differs from
     * the target alone, validate's draft requests failed), or it could not do its work (serve could not listen or
     * load its model, validate's server did not answer, an unexpected error).
     */
    failed: 1,
    /**
     * Bad usage or input, found before any work: an option or argument (commander's own errors too), a held-out file
     * that cannot be read, has invalid lines (without `--skip-invalid`) or no valid conversation, a pack input.
     */
    usage: 2,
    /**
     * generate, speedup: the drafter's vocabulary is not the target's; validate: a server's is not the data's. Its token
     * ids would mean other text.
     */
    vocabMismatch: 3,
} as const;

export type ExitCode = (typeof exitCodes)[keyof typeof exitCodes];
