/**
 * Turns whatever a request raised (a Fastify parsing or validation error, an EngineError, an ApiError, a bug) into the
 * catalog error the client receives.
 */

import type { FastifyError, FastifyRequest, FastifySchemaValidationError } from "fastify";
import { EngineError } from "../engine/errors.js";
import { ApiError, apiError, type ErrorParams, formatErrorMessage } from "./errors.js";
import { maxDraftLength, retryAfterSeconds } from "./serveDefaults.js";

/** What the mapping needs to know about the server. */
export interface ErrorContext {
    /** The body limit in bytes, for body_too_large. */
    bodyLimit: number;
    /** The loaded model's vocabulary size, for invalid_token (`?` while none is loaded). */
    vocabSize: number | undefined;
}

export function toApiError(error: unknown, request: FastifyRequest, context: ErrorContext): ApiError {
    if (error instanceof ApiError) return error;
    if (error instanceof EngineError) return fromEngineError(error);
    const fastifyError = error as Partial<FastifyError>;
    if (fastifyError.validation !== undefined) return fromValidation(fastifyError.validation, request, context);
    switch (fastifyError.code) {
        case "FST_ERR_CTP_INVALID_JSON_BODY":
            return apiError("malformed_json", { detail: "the body is not valid JSON" });
        case "FST_ERR_CTP_EMPTY_JSON_BODY":
            return apiError("malformed_json", { detail: "the body is empty" });
        case "FST_ERR_CTP_BODY_TOO_LARGE":
            return apiError("body_too_large", { limit: context.bodyLimit });
        case "FST_ERR_CTP_INVALID_MEDIA_TYPE":
            return apiError("unsupported_media_type", { contentType: request.headers["content-type"] ?? "(none)" });
    }
    const status = fastifyError.statusCode;
    if (status !== undefined && status >= 400 && status < 500) {
        return apiError("bad_request", { detail: trimPeriod(fastifyError.message ?? "unknown") });
    }
    return apiError("internal_error", { detail: trimPeriod(error instanceof Error ? error.message : String(error)) });
}

function fromEngineError(error: EngineError): ApiError {
    switch (error.code) {
        case "queue_full":
            return apiError(
                "queue_full",
                { retryAfter: retryAfterSeconds },
                { "retry-after": String(retryAfterSeconds) },
            );
        case "context_overflow":
        case "invalid_token":
        case "empty_tokens": {
            // the catalog answers these with the engine's own templates, filled from the error's fields
            const code = error.code;
            return new ApiError(code, formatErrorMessage(code, error.params as ErrorParams<typeof code>));
        }
        case "aborted":
            return apiError("request_aborted");
        case "engine_closed":
            return apiError("shutting_down");
    }
}

/** The first schema error, in the words of the catalog. */
function fromValidation(
    errors: FastifySchemaValidationError[],
    request: FastifyRequest,
    context: ErrorContext,
): ApiError {
    // if/then/else adds a summary error ("must match then schema") after the real one
    const first = errors.find((e) => e.keyword !== "if") ?? errors[0];
    if (first === undefined) return apiError("invalid_body", { path: "body", problem: "is invalid" });
    const path = first.instancePath;
    const tokenList = /^\/(?<field>tokens|prefix)$/.exec(path)?.groups?.field;
    if (tokenList !== undefined && first.keyword === "minItems") return apiError("empty_tokens", { field: tokenList });
    const tokenIndex = /^\/(?:tokens|prefix)\/(?<index>\d+)$/.exec(path)?.groups?.index;
    if (tokenIndex !== undefined) {
        return apiError("invalid_token", {
            id: describeValue(valueAt(request.body, path)),
            position: `index ${tokenIndex}`,
            vocabSize: context.vocabSize ?? "?",
        });
    }
    if (path === "/n")
        return apiError("invalid_draft_length", { n: describeValue(valueAt(request.body, path)), max: maxDraftLength });
    return apiError("invalid_body", {
        path: path === "" ? "body" : path.slice(1).replaceAll("/", "."),
        problem: first.message ?? "is invalid",
    });
}

/** The value at a JSON pointer (as Ajv reports them) inside `root`. */
function valueAt(root: unknown, pointer: string): unknown {
    let value = root;
    for (const key of pointer.split("/").slice(1)) {
        if (value === null || typeof value !== "object") return undefined;
        value = (value as Record<string, unknown>)[key.replaceAll("~1", "/").replaceAll("~0", "~")];
    }
    return value;
}

/** A received value as the client would recognize it (JSON, except numbers JSON cannot show, like 1e400). */
function describeValue(value: unknown): string {
    return typeof value === "number" ? String(value) : JSON.stringify(value);
}

function trimPeriod(text: string): string {
    return text.replace(/\.+$/, "");
}
