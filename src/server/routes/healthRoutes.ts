/** `GET /health`: 503 `loading` until the model is loaded and warmed up, then 200 `ok`; 503 `stopping` on shutdown. */

import type { FastifyPluginAsync } from "fastify";
import type { EngineSlot } from "../EngineSlot.js";
import { type HealthResponse, HealthResponse as HealthResponseSchema } from "../schemas/healthSchemas.js";
import { refTo } from "../schemas/refTo.js";

export interface HealthRoutesOptions {
    slot: EngineSlot;
}

export const healthRoutes: FastifyPluginAsync<HealthRoutesOptions> = async (app, { slot }) => {
    app.get(
        "/health",
        {
            schema: {
                summary: "Readiness",
                tags: ["server"],
                response: { 200: refTo(HealthResponseSchema), 503: refTo(HealthResponseSchema) },
            },
        },
        async (_request, reply): Promise<HealthResponse> => {
            const status = slot.status;
            reply.code(status === "ok" ? 200 : 503);
            return { status };
        },
    );
};
