/** specdraft's command tree, built without parsing anything: main.ts runs it, and the docs test reads its commands and
 * options to check every invocation the docs advise. Each subcommand lives in its own file and is registered here. */

import { createRequire } from "node:module";
import { Command } from "commander";
import { generateCommand } from "./generateCommand.js";
import { packCommand } from "./packCommand.js";
import { selfcheckCommand } from "./selfcheckCommand.js";
import { serveCommand } from "./serveCommand.js";
import { speedupCommand } from "./speedupCommand.js";
import { validateCommand } from "./validateCommand.js";

const { version } = createRequire(import.meta.url)("../../package.json") as { version: string };

export function buildProgram(): Command {
    const program = new Command("specdraft")
        .description("Draft-model server, validator and tools for speculative decoding.")
        .version(version)
        .showHelpAfterError("(add --help for usage)");
    program.addCommand(serveCommand());
    program.addCommand(validateCommand());
    program.addCommand(packCommand());
    program.addCommand(selfcheckCommand());
    program.addCommand(generateCommand());
    program.addCommand(speedupCommand());
    return program;
}
