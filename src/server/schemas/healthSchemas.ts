/** `GET /health`: loading → ok → stopping. */

import { type Static, Type } from "@sinclair/typebox";

export const HealthResponse = Type.Object(
    {
        status: Type.Union([Type.Literal("loading"), Type.Literal("ok"), Type.Literal("stopping")], {
            description: "`ok` once the model is loaded and warmed up (HTTP 200); otherwise HTTP 503.",
        }),
    },
    { $id: "HealthResponse", additionalProperties: false },
);
export type HealthResponse = Static<typeof HealthResponse>;
