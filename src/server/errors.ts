/**
 * The server's error catalog: every error a client can receive, with its stable code, HTTP status and message
 * template. docs/api.md documents each entry (test/server/errors.test.ts checks that the two agree). The problems the
 * engine finds in a request (src/engine/validateDraftRequest.ts) keep the engine's templates, so they read the same
 * wherever they are reported.
 *
 * Every error answer has the body `{"error": {"code": "...", "message": "..."}}`.
 */

import { engineErrorTemplates, fillTemplate, type TemplateSlots } from "../engine/errors.js";

/** One catalog entry: the HTTP status and a message template whose `{name}` slots are filled per error. */
export interface ErrorSpec {
    readonly status: number;
    readonly template: string;
}

export const errorCatalog = {
    bad_request: {
        status: 400,
        template: "Bad request: {detail}.",
    },
    malformed_json: {
        status: 400,
        template: "Malformed JSON body: {detail}.",
    },
    unsupported_media_type: {
        status: 415,
        template: "Unsupported Content-Type {contentType}: expected application/json.",
    },
    invalid_body: {
        status: 400,
        template: "Invalid request body: {path} {problem}.",
    },
    empty_tokens: {
        status: 400,
        template: engineErrorTemplates.empty_tokens,
    },
    invalid_token: {
        status: 400,
        template: engineErrorTemplates.invalid_token,
    },
    invalid_draft_length: {
        status: 400,
        template: "Invalid n {n}: expected an integer 1 ≤ n ≤ {max}.",
    },
    context_overflow: {
        status: 400,
        template: engineErrorTemplates.context_overflow,
    },
    body_too_large: {
        status: 413,
        template: "Request body too large: expected at most {limit} bytes.",
    },
    not_found: {
        status: 404,
        template: "No route {method} {url}: expected one of POST /draft, GET /health, GET /info, GET /metrics.",
    },
    model_loading: {
        status: 503,
        template: "The model is still loading: retry when GET /health answers 200.",
    },
    queue_full: {
        status: 503,
        template: "The draft queue is full: retry after {retryAfter} s.",
    },
    shutting_down: {
        status: 503,
        template: "The server is shutting down.",
    },
    request_aborted: {
        status: 499,
        template: "The client closed the connection before the draft was done.",
    },
    internal_error: {
        status: 500,
        template: "Internal error: {detail}.",
    },
} as const satisfies Record<string, ErrorSpec>;

export type ErrorCode = keyof typeof errorCatalog;

/** The values an error of `code` needs for its message. */
export type ErrorParams<C extends ErrorCode> = Record<
    TemplateSlots<(typeof errorCatalog)[C]["template"]>,
    string | number
>;

/** An error answered to the client as `{"error": {code, message}}` with the catalog's status. */
export class ApiError extends Error {
    readonly code: ErrorCode;
    readonly statusCode: number;
    /** Extra response headers, e.g. `Retry-After`. */
    readonly headers: Readonly<Record<string, string>>;

    constructor(code: ErrorCode, message: string, headers: Record<string, string> = {}) {
        super(message);
        this.name = "ApiError";
        this.code = code;
        this.statusCode = errorCatalog[code].status;
        this.headers = headers;
    }
}

/** Fills the catalog template of `code` with `params`. */
export function formatErrorMessage<C extends ErrorCode>(code: C, params: ErrorParams<C>): string {
    return fillTemplate(errorCatalog[code].template, params as Record<string, string | number>);
}

/** Builds the ApiError of `code`; templates without slots take no params. */
export function apiError<C extends ErrorCode>(
    code: C,
    ...args: TemplateSlots<(typeof errorCatalog)[C]["template"]> extends never
        ? [params?: Record<string, never>, headers?: Record<string, string>]
        : [params: ErrorParams<C>, headers?: Record<string, string>]
): ApiError {
    const [params, headers] = args;
    return new ApiError(code, formatErrorMessage(code, (params ?? {}) as ErrorParams<C>), headers);
}
