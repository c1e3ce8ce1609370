/**
 * `POST /draft`: the greedy continuation of a context, in specdraft's form or TensorRT-LLM's external drafter form
 * (see schemas/draftSchemas.ts). The schema checks the body's shape; the engine checks the request against the model
 * (ids against the vocabulary, context + n against the context size: src/engine/validateDraftRequest.ts), and its
 * errors reach the client through the catalog. The request's AbortSignal goes with it, so a client that disconnects
 * frees its place in the batch.
 */

import type { ServerResponse } from "node:http";
import type { FastifyPluginAsync } from "fastify";
import type { EngineSlot } from "../EngineSlot.js";
import {
    DraftAnswer,
    DraftBody,
    type DraftRequest,
    type DraftResponse,
    type TrtDraftRequest,
    type TrtDraftResponse,
} from "../schemas/draftSchemas.js";
import { ErrorResponse } from "../schemas/errorSchemas.js";
import { refTo } from "../schemas/refTo.js";

export interface DraftRoutesOptions {
    slot: EngineSlot;
    /** Tokens drafted when a request gives no `n`. */
    draftLength: number;
}

export const draftRoutes: FastifyPluginAsync<DraftRoutesOptions> = async (app, { slot, draftLength }) => {
    app.post<{ Body: DraftRequest | TrtDraftRequest }>(
        "/draft",
        {
            schema: {
                summary: "Draft the next tokens",
                description:
                    "Greedy continuation of `tokens` (or TensorRT-LLM's `prefix`). Concurrent requests are batched " +
                    "into one decode per step; a context that extends an earlier one reuses its KV cache.",
                tags: ["draft"],
                body: refTo(DraftBody),
                response: {
                    200: DraftAnswer,
                    400: refTo(ErrorResponse),
                    413: refTo(ErrorResponse),
                    415: refTo(ErrorResponse),
                    503: refTo(ErrorResponse),
                },
            },
            // before parsing: a loading or stopping server answers 503 without reading the body
            onRequest: async () => {
                slot.require();
            },
        },
        async (request, reply): Promise<DraftResponse | TrtDraftResponse> => {
            const engine = slot.require();
            const signal = clientGoneSignal(reply.raw);
            const body = request.body;
            if ("prefix" in body) {
                const maxLength = body.max_sequence_length ?? Number.POSITIVE_INFINITY;
                const n = Math.max(0, Math.min(body.n ?? draftLength, maxLength - body.prefix.length));
                const endId =
                    body.end_id !== undefined && body.end_id !== null && body.end_id >= 0 ? body.end_id : undefined;
                const draft = await engine.draft(body.prefix, n, endId === undefined ? { signal } : { endId, signal });
                const requestId = body.request_id;
                return requestId === undefined || requestId === null
                    ? { draft_tokens: draft }
                    : { draft_tokens: draft, request_id: requestId };
            }
            return { draft: await engine.draft(body.tokens, body.n ?? draftLength, { signal }) };
        },
    );
};

/**
 * Aborts when the client disconnects before its answer is written. (Fastify's request.signal follows the request
 * stream, which Node 20 closes as soon as the body has been read, so it cannot tell a client that left.)
 */
function clientGoneSignal(response: ServerResponse): AbortSignal {
    const controller = new AbortController();
    response.once("close", () => {
        if (!response.writableFinished) controller.abort();
    });
    return controller.signal;
}
