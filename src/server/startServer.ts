/**
 * Starts `specdraft serve`: checks the model file, listens, and only then loads and warms up the engine, so
 * `GET /health` answers 503 `loading` while the model loads and 200 `ok` once a first tiny draft has run.
 */

import type { AddressInfo } from "node:net";
import type { EngineTuning } from "../engine/EngineTuning.js";
import { readModelFileInfo } from "../engine/gguf.js";
import type { LoadEngineOptions } from "../engine/loadEngine.js";
import type { DraftEngine, GpuChoice } from "../engine/types.js";
import { type App, buildApp } from "./buildApp.js";

/** src/engine/loadEngine.ts's loadEngine, or a stand-in for tests. */
export type EngineLoader = (options: LoadEngineOptions) => Promise<DraftEngine>;

export interface ServeOptions {
    /** The GGUF drafter to serve. */
    modelPath: string;
    /** Defaults (in the CLI) to `127.0.0.1`. */
    host: string;
    /** 0 picks a free port. Defaults (in the CLI) to `8000`. */
    port: number;
    /** Tokens drafted when a request gives no `n`. Defaults (in the CLI) to `16`. */
    draftLength: number;
    /** Sequences held at once. Defaults (in the CLI) to `32`. */
    streams: number;
    /** Tokens per sequence. Defaults (in the CLI) to `4096`. */
    contextSize: number;
    /** Defaults (in the CLI) to `auto`. */
    gpu: GpuChoice;
    /** Requests waiting before 503 queue_full. Defaults (in the CLI) to `1024`. */
    maxQueue: number;
    /** Largest request body in bytes. Defaults (in the CLI) to `1048576`. */
    bodyLimit: number;
    /** Log every request to stderr. Defaults (in the CLI) to `false`. */
    logRequests: boolean;
    /** The engine's tuning (threads, candidates, KV type, …); each setting not given is the backend's default. */
    tuning?: EngineTuning;
}

/** Where the server writes: the ready line (with the URL) to `out`, progress and problems to `err`. */
export interface ServerIo {
    out: NodeJS.WritableStream;
    err: NodeJS.WritableStream;
}

export interface RunningServer extends App {
    /** `http://host:port` of the listening socket. */
    url: string;
    /** Settles when the engine is loaded and warmed up (resolves) or failed to load (rejects). */
    ready: Promise<void>;
    /** Refuses new requests, finishes in-flight ones, closes the socket and the engine. */
    close(): Promise<void>;
}

/** Token drafted from at warm-up: id 0 exists in every vocabulary. */
const warmUpContext = [0];

export async function startServer(
    options: ServeOptions,
    loadEngine: EngineLoader,
    io: ServerIo,
): Promise<RunningServer> {
    // a missing, corrupt or truncated model ends serve here, in one line, before the port opens
    const model = await readModelFileInfo(options.modelPath);

    const built = buildApp({
        draftLength: options.draftLength,
        bodyLimit: options.bodyLimit,
        logRequests: options.logRequests,
    });
    const { app, slot, metrics } = built;
    await app.listen({ host: options.host, port: options.port });
    const url = formatUrl(app.server.address() as AddressInfo);
    io.err.write(
        `specdraft: listening at ${url}, loading ${options.modelPath} (${model.architecture}, ${formatBytes(model.fileBytes)})…\n`,
    );

    let engine: DraftEngine | undefined;
    const ready = (async () => {
        engine = await loadEngine({
            modelPath: options.modelPath,
            // read above, before listening: the engine takes it rather than reading the header again
            modelFile: model,
            streams: options.streams,
            contextSize: options.contextSize,
            gpu: options.gpu,
            maxQueue: options.maxQueue,
            observer: metrics.engineObserver,
            ...options.tuning,
        });
        if (options.draftLength + 1 > engine.info.contextSize) {
            throw new Error(
                `--draft-len ${options.draftLength} does not fit the context size ${engine.info.contextSize}`,
            );
        }
        await engine.draft(warmUpContext, 1);
        slot.fill(engine);
        const info = engine.info;
        io.out.write(
            `specdraft: serving ${info.modelName} (${info.architecture}, ${info.quantization}, vocab ${info.vocabSize}, ` +
                `${info.backend}, ${info.streams} streams × ${info.contextSize} tokens) at ${url}\n`,
        );
    })();
    // the caller decides what a failed load means; until then an unobserved rejection must not crash the process
    ready.catch(() => {});

    let closing: Promise<void> | undefined;
    const close = () => {
        closing ??= (async () => {
            slot.stop();
            await app.close();
            await engine?.close();
        })();
        return closing;
    };

    return { ...built, url, ready, close };
}

function formatUrl(address: AddressInfo): string {
    const host = address.family === "IPv6" ? `[${address.address}]` : address.address;
    return `http://${host}:${address.port}`;
}

function formatBytes(bytes: number): string {
    if (bytes >= 1024 ** 3) return `${(bytes / 1024 ** 3).toFixed(2)} GiB`;
    if (bytes >= 1024 ** 2) return `${(bytes / 1024 ** 2).toFixed(1)} MiB`;
    return `${(bytes / 1024).toFixed(0)} KiB`;
}
