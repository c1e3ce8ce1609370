/**
 * `specdraft serve`: serves a GGUF draft model over HTTP (POST /draft, GET /health, /info, /metrics; see docs/api.md).
 * Without --model it serves the embedded default drafter, models/specdraft-default.gguf of the installed package.
 */

import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { Command, Option } from "commander";
import {
    defaultContextSize,
    defaultDraftLength,
    defaultGpu,
    defaultMaxQueue,
    defaultStreams,
    gpuChoices,
    maxStreams,
} from "../engine/engineDefaults.js";
import { loadEngine } from "../engine/loadEngine.js";
import type { GpuChoice } from "../engine/types.js";
import {
    defaultBodyLimit,
    defaultHost,
    defaultModelFile,
    defaultPort,
    maxDraftLength,
} from "../server/serveDefaults.js";
import type { ServeOptions } from "../server/startServer.js";
import { parseIntegerOption } from "./commandOptions.js";
import { addEngineTuningOptions, type EngineTuningFlags, engineTuningOf } from "./engineTuningOptions.js";
import { runServe } from "./runServe.js";

/** The package root: this file is src/cli/serveCommand.ts or dist/cli/serveCommand.js. */
const packageRoot = fileURLToPath(new URL("../../", import.meta.url));

/** The model served without --model, resolved against the package root (not the working directory). */
const defaultModelPath = resolve(packageRoot, defaultModelFile);

/** What commander hands the action. */
interface ServeFlags extends EngineTuningFlags {
    model: string;
    host: string;
    port: number;
    draftLen: number;
    streams: number;
    context: number;
    gpu: GpuChoice;
    maxQueue: number;
    bodyLimit: number;
    threads: number | undefined;
    log: boolean;
}

/** The commander command, for src/cli/main.ts: `program.addCommand(serveCommand())`. */
export function serveCommand(): Command {
    const command = new Command("serve")
        .description(
            "Serve a GGUF draft model over HTTP: POST /draft {tokens, n?} → {draft}. Listens at once; GET /health " +
                "answers 503 until the model is loaded, then 200.",
        )
        .option("--model <path.gguf>", "GGUF draft model to serve (default: the embedded drafter)", defaultModelPath)
        .option("--host <address>", "address to listen on", defaultHost)
        .option("--port <port>", "port to listen on (0: any free port)", parseIntegerOption(0, 65535), defaultPort)
        .option(
            "--draft-len <k>",
            `tokens drafted when a request gives no n (1–${maxDraftLength})`,
            parseIntegerOption(1, maxDraftLength),
            defaultDraftLength,
        )
        .option(
            "--streams <n>",
            "sequences held at once, each with its own KV cache",
            parseIntegerOption(1, maxStreams),
            defaultStreams,
        )
        .option(
            "--context <tokens>",
            "tokens one sequence can hold: context + draft",
            parseIntegerOption(2, 1 << 20),
            defaultContextSize,
        )
        .addOption(new Option("--gpu <backend>", "where llama.cpp computes").choices(gpuChoices).default(defaultGpu))
        .option(
            "--max-queue <n>",
            "draft requests that may wait before new ones get 503 queue_full",
            parseIntegerOption(1, 1 << 20),
            defaultMaxQueue,
        )
        .option(
            "--body-limit <bytes>",
            "largest request body; larger ones get 413",
            parseIntegerOption(64, 1 << 30),
            defaultBodyLimit,
        )
        .option(
            "--threads <n>",
            "CPU threads for llama.cpp (default: the CPUs less one, 1 to 8)",
            parseIntegerOption(1, 1024),
        )
        .option("--log", "log every request to stderr", false);
    return addEngineTuningOptions(command).action(async (flags: ServeFlags) => {
        const options: ServeOptions = {
            modelPath: resolve(flags.model),
            host: flags.host,
            port: flags.port,
            draftLength: flags.draftLen,
            streams: flags.streams,
            contextSize: flags.context,
            gpu: flags.gpu,
            maxQueue: flags.maxQueue,
            bodyLimit: flags.bodyLimit,
            logRequests: flags.log,
            tuning: { ...engineTuningOf(flags), threads: flags.threads },
        };
        // loadEngine loads the native addon only when called, so --help and a bad model file never wait for it
        const exitCode = await runServe(options, loadEngine);
        // llama.cpp may hold native handles after close; the server is done, so end the process here
        process.exit(exitCode);
    });
}
