#!/usr/bin/env node
/** specdraft's command line. Each subcommand lives in its own file and is registered here, one line each. */

import { createRequire } from "node:module";
import { Command, CommanderError } from "commander";
import { exitCodes } from "./exitCodes.js";
import { generateCommand } from "./generateCommand.js";
import { packCommand } from "./packCommand.js";
import { selfcheckCommand } from "./selfcheckCommand.js";
import { serveCommand } from "./serveCommand.js";
import { validateCommand } from "./validateCommand.js";

const { version } = createRequire(import.meta.url)("../../package.json") as { version: string };

const program = new Command("specdraft")
    .description("Draft-model server, validator and tools for speculative decoding.")
    .version(version)
    .showHelpAfterError("(add --help for usage)");

program.addCommand(serveCommand());
program.addCommand(validateCommand());
program.addCommand(packCommand());
program.addCommand(selfcheckCommand());
program.addCommand(generateCommand());

// commander exits 1 on its own usage errors; specdraft's code for bad usage is 2 (exitCodes.ts), so it throws instead
for (const command of [program, ...program.commands]) command.exitOverride();
try {
    await program.parseAsync();
} catch (error) {
    if (!(error instanceof CommanderError)) throw error;
    // commander has printed the problem (or the help, or the version: those end with 0)
    process.exitCode = error.exitCode === 0 ? exitCodes.ok : exitCodes.usage;
}
