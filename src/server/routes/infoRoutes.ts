/** `GET /info`: the loaded drafter (name, vocabulary and its fingerprint, sizes, quantization, backend). */

import type { FastifyPluginAsync } from "fastify";
import type { EngineSlot } from "../EngineSlot.js";
import { ErrorResponse } from "../schemas/errorSchemas.js";
import { type InfoResponse, InfoResponse as InfoResponseSchema } from "../schemas/infoSchemas.js";
import { refTo } from "../schemas/refTo.js";
import { maxDraftLength } from "../serveDefaults.js";

export interface InfoRoutesOptions {
    slot: EngineSlot;
    /** Tokens drafted when a request gives no `n`. */
    draftLength: number;
}

export const infoRoutes: FastifyPluginAsync<InfoRoutesOptions> = async (app, { slot, draftLength }) => {
    app.get(
        "/info",
        {
            schema: {
                summary: "The loaded drafter",
                tags: ["server"],
                response: { 200: refTo(InfoResponseSchema), 503: refTo(ErrorResponse) },
            },
        },
        async (): Promise<InfoResponse> => {
            const info = slot.require().info;
            return {
                model: info.modelName,
                architecture: info.architecture,
                vocab_size: info.vocabSize,
                vocab_fingerprint: info.vocabFingerprint,
                draft_length: draftLength,
                max_draft_length: maxDraftLength,
                context_size: info.contextSize,
                quantization: info.quantization,
                file_bytes: info.fileBytes,
                backend: info.backend,
                streams: info.streams,
                engine: info.engine,
                flash_attention: info.flashAttention,
                lookahead: {
                    candidates: info.lookahead.candidates,
                    step_tokens: info.lookahead.stepTokens,
                    fill: info.lookahead.fill,
                },
            };
        },
    );
};
