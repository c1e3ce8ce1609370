/**
 * node-llama-cpp's two verifiers against the target alone, behind `specdraft generate`'s flags, table, `--out` summary
 * and exit codes (bench/README.md: what they show). `--verifier node-llama-cpp` is the library's own speculative path,
 * which in node-llama-cpp 3.21.1 accepts at most one draft token per target step (τ ≤ 2 for any drafter);
 * `--verifier exact-node-llama-cpp` is specdraft's loop over a node-llama-cpp sequence, which reaches τ = k + 1 with a
 * perfect drafter. Both run the target (and a `--draft-model`) through node-llama-cpp:
 *
 *   node --import tsx bench/libraryVerifiers.ts --verifier node-llama-cpp --target T.gguf --draft-model T.gguf \
 *       --prompt "def add(a, b):" --max-tokens 64 --draft-len 8 --gpu cpu
 */
import { type Command, CommanderError, Option } from "commander";
import { exitCodes } from "../src/cli/exitCodes.js";
import { generateCommand } from "../src/cli/generateCommand.js";
import {
    type LibraryVerifierKind,
    libraryVerifierKinds,
    runLibraryVerifier,
} from "./libraryVerifiers/runLibraryVerifier.js";

// the verifier is read when generation starts, after commander has parsed it
const command: Command = generateCommand((options) =>
    runLibraryVerifier({ ...options, verifier: command.opts<{ verifier: LibraryVerifierKind }>().verifier }),
)
    .name("libraryVerifiers")
    .description("node-llama-cpp's verifiers against the target alone, with `specdraft generate`'s flags")
    .addOption(
        new Option(
            "--verifier <kind>",
            "node-llama-cpp: the library's speculative path (accepts ≤ 1 draft token a step); " +
                "exact-node-llama-cpp: specdraft's loop over a node-llama-cpp sequence",
        )
            .choices(libraryVerifierKinds)
            .default("node-llama-cpp"),
    )
    .exitOverride();
try {
    await command.parseAsync();
} catch (error) {
    if (!(error instanceof CommanderError)) throw error;
    process.exitCode = error.exitCode === 0 ? exitCodes.ok : exitCodes.usage;
}
