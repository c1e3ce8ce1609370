/** Every schema shared by `$id`: registered on the app with addSchema and written to docs/openapi.json. */

import type { TSchema } from "@sinclair/typebox";
import { DraftBody, DraftRequest, DraftResponse, TrtDraftRequest, TrtDraftResponse } from "./draftSchemas.js";
import { ErrorResponse } from "./errorSchemas.js";
import { HealthResponse } from "./healthSchemas.js";
import { InfoResponse } from "./infoSchemas.js";

export const sharedSchemas: readonly TSchema[] = [
    ErrorResponse,
    HealthResponse,
    InfoResponse,
    DraftRequest,
    TrtDraftRequest,
    DraftBody,
    DraftResponse,
    TrtDraftResponse,
];
