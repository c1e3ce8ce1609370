/** The body of every error answer (codes and messages: src/server/errors.ts). */

import { type Static, Type } from "@sinclair/typebox";
import { type ErrorCode, errorCatalog } from "../errors.js";

export const ErrorResponse = Type.Object(
    {
        error: Type.Object(
            {
                code: Type.Unsafe<ErrorCode>({
                    type: "string",
                    enum: Object.keys(errorCatalog),
                    description: "Stable error code; see docs/api.md.",
                }),
                message: Type.String({ description: "What was wrong: the value received and what was expected." }),
            },
            { additionalProperties: false },
        ),
    },
    { $id: "ErrorResponse", additionalProperties: false },
);
export type ErrorResponse = Static<typeof ErrorResponse>;
