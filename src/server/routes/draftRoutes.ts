/**
 * `POST /draft`: the greedy continuation of a context, in specdraft's form or TensorRT-LLM's external drafter form
 * (see schemas/draftSchemas.ts). The route checks what the schema cannot (ids against the vocabulary, context + n
 * against the context size), then hands the work to the engine with the request's AbortSignal, so a client that
 * disconnects frees its place in the batch.
 */

import type { ServerResponse } from "node:http";
import type { FastifyPluginAsync } from "fastify";
import type { DraftEngine } from "../../engine/types.js";
import type { EngineSlot } from "../EngineSlot.js";
import { apiError } from "../errors.js";
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
                const draft = await draftChecked(engine, body.prefix, n, endId, signal);
                const requestId = body.request_id;
                return requestId === undefined || requestId === null
                    ? { draft_tokens: draft }
                    : { draft_tokens: draft, request_id: requestId };
            }
            return { draft: await draftChecked(engine, body.tokens, body.n ?? draftLength, undefined, signal) };
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

/** Checks ids and length against the loaded model, then drafts (nothing to do for n = 0). */
async function draftChecked(
    engine: DraftEngine,
    tokens: readonly number[],
    n: number,
    endId: number | undefined,
    signal: AbortSignal,
): Promise<number[]> {
    const { vocabSize, contextSize } = engine.info;
    const badIndex = tokens.findIndex((id) => id >= vocabSize);
    if (badIndex >= 0) throw apiError("invalid_token", { id: tokens[badIndex], index: badIndex, vocabSize });
    if (tokens.length + n > contextSize) {
        throw apiError("context_overflow", { tokens: tokens.length, n, total: tokens.length + n, contextSize });
    }
    if (n === 0) return [];
    return engine.draft(tokens, n, endId === undefined ? { signal } : { endId, signal });
}
