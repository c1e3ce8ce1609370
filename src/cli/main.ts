#!/usr/bin/env node
/** specdraft's command line: the command tree of program.ts, parsed with specdraft's exit codes. */

import { CommanderError } from "commander";
import { exitCodes } from "./exitCodes.js";
import { buildProgram } from "./program.js";

const program = buildProgram();

// commander exits 1 on its own usage errors; specdraft's code for bad usage is 2 (exitCodes.ts), so it throws instead
for (const command of [program, ...program.commands]) command.exitOverride();
try {
    await program.parseAsync();
} catch (error) {
    if (!(error instanceof CommanderError)) throw error;
    // commander has printed the problem (or the help, or the version: those end with 0)
    process.exitCode = error.exitCode === 0 ? exitCodes.ok : exitCodes.usage;
}
