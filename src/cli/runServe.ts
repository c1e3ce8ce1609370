/**
 * `specdraft serve` as a process: starts the server, and turns its life into an exit code. A bad model file, a port in
 * use or a failed load print one line and give 1; SIGTERM/SIGINT finish in-flight requests and give 0 (a second signal
 * gives up at once with 1).
 */

import { EngineLoadError } from "../engine/errors.js";
import { type EngineLoader, type ServeOptions, type ServerIo, startServer } from "../server/startServer.js";
import { exitCodes } from "./exitCodes.js";

const shutdownSignals = ["SIGTERM", "SIGINT"] as const;

export async function runServe(
    options: ServeOptions,
    loadEngine: EngineLoader,
    io: ServerIo = { out: process.stdout, err: process.stderr },
): Promise<number> {
    let server: Awaited<ReturnType<typeof startServer>>;
    try {
        server = await startServer(options, loadEngine, io);
    } catch (error) {
        io.err.write(`specdraft serve: ${describe(error, options)}\n`);
        return exitCodes.failed;
    }

    const listeners: [NodeJS.Signals, () => void][] = [];
    const exitCode = await new Promise<number>((resolve) => {
        let stopping = false;
        const stop = (signal: NodeJS.Signals) => {
            if (stopping) {
                io.err.write(`specdraft: ${signal} again, exiting without waiting.\n`);
                resolve(exitCodes.failed);
                return;
            }
            stopping = true;
            io.err.write(`specdraft: ${signal}, finishing in-flight requests…\n`);
            server.close().then(
                () => resolve(exitCodes.ok),
                (error: unknown) => {
                    io.err.write(`specdraft serve: error while closing: ${describe(error, options)}\n`);
                    resolve(exitCodes.failed);
                },
            );
        };
        for (const signal of shutdownSignals) {
            const listener = () => stop(signal);
            listeners.push([signal, listener]);
            process.on(signal, listener);
        }
        server.ready.catch((error: unknown) => {
            if (stopping) return;
            stopping = true;
            // EngineLoadError already names the file
            const reason = describe(error, options);
            io.err.write(
                `specdraft serve: ${error instanceof EngineLoadError ? reason : `cannot load ${options.modelPath}: ${reason}`}\n`,
            );
            server.close().finally(() => resolve(exitCodes.failed));
        });
    });
    for (const [signal, listener] of listeners) process.off(signal, listener);
    return exitCode;
}

/** One line saying what went wrong. */
function describe(error: unknown, options: ServeOptions): string {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "EADDRINUSE")
        return `cannot listen on ${options.host}:${options.port}: the address is already in use.`;
    if (code === "EACCES") return `cannot listen on ${options.host}:${options.port}: permission denied.`;
    const message = error instanceof Error ? error.message : String(error);
    return message.replace(/\s+/g, " ").trim();
}
