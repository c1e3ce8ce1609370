/**
 * The server's error catalog: every error a client can receive, with its stable code, HTTP status and message
 * template. docs/api.md documents each entry (test/server/errors.test.ts checks that the two agree).
 *
 * Every error answer has the body `{"error": {"code": "...", "message": "..."}}`.
 */

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
        template: "Empty {field}: expected at least one token id.",
    },
    invalid_token: {
        status: 400,
        template: "Invalid token id {id} at index {index}: expected 0 ≤ id < {vocabSize}.",
    },
    invalid_draft_length: {
        status: 400,
        template: "Invalid n {n}: expected an integer 1 ≤ n ≤ {max}.",
    },
    context_overflow: {
        status: 400,
        template: "{tokens} tokens + {n} to draft = {total} exceed the context size: expected at most {contextSize}.",
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

/** The `{name}` slots of a template, as a union of names. */
type TemplateSlots<T extends string> = T extends `${string}{${infer Slot}}${infer Rest}`
    ? Slot | TemplateSlots<Rest>
    : never;

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
    const values = params as Record<string, string | number>;
    return errorCatalog[code].template.replace(/\{(\w+)\}/g, (slot, name: string) => String(values[name] ?? slot));
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
