/** Errors the engine raises for requests it cannot serve; the server maps each `code` to an HTTP answer. */

export type EngineErrorCode =
    /** More requests waiting than the queue holds: try again later (HTTP 503 with Retry-After). */
    | "queue_full"
    /** The prompt plus the draft does not fit the context size. */
    | "context_overflow"
    /** A token id outside 0 ≤ id < vocabSize. */
    | "invalid_token"
    /** The caller aborted (client disconnected). */
    | "aborted"
    /** The engine is shutting down or closed. */
    | "engine_closed";

export class EngineError extends Error {
    readonly code: EngineErrorCode;

    constructor(code: EngineErrorCode, message: string) {
        super(message);
        this.name = "EngineError";
        this.code = code;
    }
}

/**
 * The engine cannot start: a missing or corrupt model file, a model llama.cpp rejects, or a native engine that is not
 * built. The message is one line naming the file or the fix, for the CLI to print before it exits ≠ 0.
 */
export class EngineLoadError extends Error {
    constructor(message: string) {
        super(message.replace(/\s+/g, " ").trim());
        this.name = "EngineLoadError";
    }
}
