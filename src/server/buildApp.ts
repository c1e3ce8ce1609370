/**
 * The Fastify app of `specdraft serve`: shared schemas, one plugin per resource, the error catalog as the only error
 * format, and request metrics. It does not listen and does not load the model (see startServer.ts); tests drive it with
 * `app.inject` and any DraftEngine in the slot.
 */

import type { IncomingMessage } from "node:http";
import Fastify, { type FastifyInstance } from "fastify";
import "./schemas/openApiRouteFields.js";
import { EngineSlot } from "./EngineSlot.js";
import { apiError } from "./errors.js";
import { draftRoutes } from "./routes/draftRoutes.js";
import { healthRoutes } from "./routes/healthRoutes.js";
import { infoRoutes } from "./routes/infoRoutes.js";
import { metricsRoutes } from "./routes/metricsRoutes.js";
import { ServerMetrics } from "./ServerMetrics.js";
import type { ErrorResponse } from "./schemas/errorSchemas.js";
import { sharedSchemas } from "./schemas/sharedSchemas.js";
import { refusedBodyLingerMs } from "./serveDefaults.js";
import { toApiError } from "./toApiError.js";

/**
 * What the app is built with. The draft length and body limit are resolved by the caller (serve's command applies
 * defaultDraftLength and defaultBodyLimit once, through commander), so the app applies no default of its own.
 */
export interface AppOptions {
    /** Where routes find the engine. Defaults to an empty (loading) slot. */
    slot?: EngineSlot;
    /** Where requests and engine events are counted. Defaults to a fresh ServerMetrics. */
    metrics?: ServerMetrics;
    /** Tokens drafted when a request gives no `n`. */
    draftLength: number;
    /** Largest request body in bytes (larger: 413). */
    bodyLimit: number;
    /** Log each request (pino, to stderr). Defaults to `false`. */
    logRequests?: boolean;
}

export interface App {
    app: FastifyInstance;
    slot: EngineSlot;
    metrics: ServerMetrics;
}

export function buildApp(options: AppOptions): App {
    const slot = options.slot ?? new EngineSlot();
    const metrics = options.metrics ?? new ServerMetrics();
    const { draftLength, bodyLimit } = options;

    const app = Fastify({
        bodyLimit,
        logger: options.logRequests === true ? { level: "info", stream: process.stderr } : false,
        // the slot answers 503 shutting_down in the catalog's format instead
        return503OnClosing: false,
        // unknown keys are ignored, __proto__ and constructor too (rather than failing the whole body)
        onProtoPoisoning: "remove",
        onConstructorPoisoning: "remove",
        ajv: {
            customOptions: {
                // wrong types are errors, never silently converted ("5" is not a token id)
                coerceTypes: false,
                removeAdditional: false,
                // request_id is integer | string | null, written as a JSON Schema type list
                allowUnionTypes: true,
            },
        },
    });

    for (const schema of sharedSchemas) app.addSchema(schema);

    app.setErrorHandler(async (error, request, reply) => {
        const apiErr = toApiError(error, request, { bodyLimit, vocabSize: slot.loaded?.info.vocabSize });
        if (apiErr.statusCode >= 500 && apiErr.code !== "queue_full") request.log.error(error);
        if (apiErr.code === "body_too_large") await discardRestOfBody(request.raw);
        const body: ErrorResponse = { error: { code: apiErr.code, message: apiErr.message } };
        return reply.code(apiErr.statusCode).headers(apiErr.headers).send(body);
    });

    app.setNotFoundHandler((request) => {
        const [path = ""] = request.url.split("?");
        throw apiError("not_found", { method: request.method, url: path });
    });

    // on shutdown, close each connection after its answer; a kept-alive socket would hold app.close() for the
    // keep-alive timeout (72 s)
    app.addHook("onSend", async (_request, reply) => {
        if (slot.status === "stopping") reply.header("connection", "close");
    });

    app.addHook("onResponse", async (request, reply) => {
        metrics.recordRequest(
            request.routeOptions.url ?? "unmatched",
            request.method,
            reply.statusCode,
            reply.elapsedTime / 1000,
        );
    });

    app.register(healthRoutes, { slot });
    app.register(infoRoutes, { slot, draftLength });
    app.register(draftRoutes, { slot, draftLength });
    app.register(metricsRoutes, { metrics });

    return { app, slot, metrics };
}

/**
 * Fastify refuses a body over the limit before reading it (or stops reading at the limit) and closes the connection
 * after its 413. A socket closed with unread bytes is reset (TCP RST), and a client still sending then loses the answer
 * it has not read yet (under CPU load, many 60 MB uploads did). So the rest of the body is read and discarded first;
 * a client still sending after `refusedBodyLingerMs` gets the answer then (as nginx's lingering close bounds it).
 */
async function discardRestOfBody(raw: IncomingMessage): Promise<void> {
    if (raw.complete) return;
    await new Promise<void>((resolve) => {
        const done = () => {
            clearTimeout(linger);
            resolve();
        };
        const linger = setTimeout(done, refusedBodyLingerMs);
        raw.once("end", done).once("close", done).resume();
    });
}
