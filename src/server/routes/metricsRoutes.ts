/** `GET /metrics`: Prometheus text exposition of the app's own registry (see ServerMetrics.ts). */

import type { FastifyPluginAsync } from "fastify";
import type { ServerMetrics } from "../ServerMetrics.js";

export interface MetricsRoutesOptions {
    metrics: ServerMetrics;
}

export const metricsRoutes: FastifyPluginAsync<MetricsRoutesOptions> = async (app, { metrics }) => {
    app.get(
        "/metrics",
        {
            schema: {
                summary: "Prometheus metrics",
                tags: ["server"],
                produces: ["text/plain"],
                response: { 200: { type: "string", description: "Prometheus text format 0.0.4." } },
            },
        },
        async (_request, reply) => {
            reply.type(metrics.contentType);
            return metrics.render();
        },
    );
};
