/**
 * `specdraft pack`: writes a self-describing drafter folder — the GGUF, serve.sh, architecture.json and
 * data_manifest.json, with --bundle also the runtime serve.sh needs where specdraft is not installed — that
 * `specdraft selfcheck` (and a grader) can run as is, and refuses one over --max-bytes.
 */
import { Command, Option } from "commander";
import { defaultDraftLength, maxLookahead } from "../engine/engineDefaults.js";
import { type BundleGpu, bundleGpus } from "../pack/bundleRuntime.js";
import { defaultMaxFolderBytes } from "../pack/drafterFolder.js";
import { formatByteCount } from "../pack/folderBytes.js";
import { PackError, type PackOptions, packDrafter } from "../pack/packDrafter.js";
import { type CommandIo, parseByteCountOption, parseIntegerOption, processIo } from "./commandOptions.js";
import { exitCodes } from "./exitCodes.js";

/** Runs the command; returns the exit code. */
export async function runPack(options: PackOptions, io: CommandIo = processIo): Promise<number> {
    try {
        const result = await packDrafter(options);
        for (const warning of result.warnings) io.err.write(`warning: ${warning}\n`);
        const a = result.architecture;
        io.out.write(
            `packed ${a.model_file} (${a.architecture}, ${a.quantization}, ${(a.size_bytes / 2 ** 20).toFixed(1)} MiB, ` +
                `${a.parameters.toLocaleString("en-US")} parameters, vocab ${a.vocab_size} ${a.vocab_fingerprint.slice(0, 12)}…) into ${result.dir}\n`,
        );
        for (const file of result.files) io.out.write(`  ${file}\n`);
        const { total, max } = result.bytes;
        const share = (bytes: number): string => `${((100 * bytes) / max).toFixed(1)} % of the cap`;
        io.out.write(
            `folder: ${formatByteCount(total)} of --max-bytes ${formatByteCount(max)} (model ${share(a.size_bytes)}` +
                (a.runtime
                    ? `, runtime ${formatByteCount(a.runtime.bytes)} = ${share(a.runtime.bytes)}: node ${a.runtime.node}, ${a.runtime.backends.join(" + ")})\n`
                    : "; serve.sh needs node and specdraft on the host: --bundle carries them)\n"),
        );
        io.out.write(
            `check it: specdraft selfcheck ${result.dir} --data HELD_OUT.jsonl${a.runtime ? " --clean-env" : ""}\n`,
        );
        return exitCodes.ok;
    } catch (error) {
        if (!(error instanceof PackError)) throw error;
        io.err.write(`specdraft pack: ${error.message}\n`);
        return exitCodes.usage;
    }
}

/** The commander command, for src/cli/main.ts: `program.addCommand(packCommand())`. */
export function packCommand(): Command {
    return new Command("pack")
        .description(
            "Write a self-describing drafter folder: the model, serve.sh, architecture.json and data_manifest.json " +
                "(with --bundle also node, specdraft and llama.cpp, so serve.sh runs where specdraft is not installed).",
        )
        .requiredOption("--model <drafter.gguf>", "the GGUF drafter")
        .requiredOption("--out <dir>", "folder to write (empty or absent)")
        .option(
            "--manifest <data_manifest.json>",
            "training sources with pinned revisions or sha256, and the split each fed (see docs/validate.md)",
        )
        .option(
            "--base <name@rev>",
            "the model the drafter was trained from and its revision, e.g. Qwen/Qwen3-1.7B@<rev> " +
                "(default: the GGUF's general.base_model, which python -m specdraft_train export writes)",
        )
        .option(
            "--draft-len <k>",
            "draft length recorded and passed to serve",
            parseIntegerOption(1),
            defaultDraftLength,
        )
        .option(
            "--max-bytes <bytes>",
            "refuse a folder larger than this, every byte counted (e.g. 1000000000, 950MB, 1GiB)",
            parseByteCountOption,
            defaultMaxFolderBytes,
        )
        .option(
            "--bundle",
            "carry the runtime: this node, the built specdraft and its production dependencies with llama.cpp's CPU " +
                "binaries, xz-compressed; serve.sh unpacks it outside the folder at start-up",
            false,
        )
        .addOption(
            new Option(
                "--bundle-gpu <backend>",
                "also bundle this GPU engine and its llama.cpp binaries (implies --bundle)",
            ).choices(bundleGpus),
        )
        .option(
            "--lookahead <n>",
            `prompt-lookup candidates per drafter step to serve with, 0–${maxLookahead} (0: off; recorded in ` +
                "architecture.json, passed to serve; default: serve's for its backend)",
            parseIntegerOption(0, maxLookahead),
        )
        .option("--force", "write into a non-empty folder", false)
        .action(
            async (flags: {
                model: string;
                out: string;
                manifest?: string;
                base?: string;
                draftLen: number;
                maxBytes: number;
                bundle: boolean;
                bundleGpu?: BundleGpu;
                lookahead?: number;
                force: boolean;
            }) => {
                process.exitCode = await runPack({
                    model: flags.model,
                    out: flags.out,
                    manifest: flags.manifest,
                    base: flags.base,
                    draftLength: flags.draftLen,
                    lookahead: flags.lookahead,
                    maxBytes: flags.maxBytes,
                    bundle: flags.bundle,
                    bundleGpus: flags.bundleGpu ? [flags.bundleGpu] : [],
                    force: flags.force,
                });
            },
        );
}
