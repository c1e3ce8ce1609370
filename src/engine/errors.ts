/**
 * The engine's errors. Each has a stable code and the structured fields (`params`) its message is made of; the message
 * comes from this file's templates, and the server answers the codes it shares with the engine through the same
 * templates (src/server/errors.ts), so a problem has one wording whoever reports it.
 */

/** The `{name}` slots of a message template, as a union of names. */
export type TemplateSlots<T extends string> = T extends `${string}{${infer Slot}}${infer Rest}`
    ? Slot | TemplateSlots<Rest>
    : never;

/** Fills the `{name}` slots of `template` from `params` (a slot without a value is left as it is). */
export function fillTemplate(template: string, params: Readonly<Record<string, string | number>>): string {
    return template.replace(/\{(\w+)\}/g, (slot, name: string) => String(params[name] ?? slot));
}

/** The message template of each engine error code. */
export const engineErrorTemplates = {
    /** More requests waiting than the queue holds: try again later (the server answers 503 with Retry-After). */
    queue_full: "Draft queue full: {waiting} requests waiting (limit {limit}).",
    /** The prompt plus the draft does not fit the context size. */
    context_overflow:
        "{tokens} tokens + {n} to draft = {total} exceed the context size: expected at most {contextSize}.",
    /** A token id outside 0 ≤ id < vocabSize, in the prompt (`index 3`) or as the end id (`end_id`). */
    invalid_token: "Invalid token id {id} at {position}: expected 0 ≤ id < {vocabSize}.",
    /** Nothing to draft from: a draft continues at least one token. */
    empty_tokens: "Empty {field}: expected at least one token id.",
    /** The caller aborted (client disconnected). */
    aborted: "The draft request was aborted.",
    /** The engine is shutting down or closed. */
    engine_closed: "The draft engine is closed.",
} as const;

export type EngineErrorCode = keyof typeof engineErrorTemplates;

/** The fields an engine error of `code` carries: one per slot of its template. */
export type EngineErrorParams<C extends EngineErrorCode> = Record<
    TemplateSlots<(typeof engineErrorTemplates)[C]>,
    string | number
>;

export class EngineError extends Error {
    readonly code: EngineErrorCode;
    /** The values in the message, by slot name, e.g. `{ id: 151936, position: "index 3", vocabSize: 151936 }`. */
    readonly params: Readonly<Record<string, string | number>>;

    /** Use `engineError(code, params)`, which checks the params against the code's template. */
    constructor(code: EngineErrorCode, params: Readonly<Record<string, string | number>>) {
        super(fillTemplate(engineErrorTemplates[code], params));
        this.name = "EngineError";
        this.code = code;
        this.params = params;
    }
}

/** The EngineError of `code`; templates without slots take no params. */
export function engineError<C extends EngineErrorCode>(
    code: C,
    ...[params]: TemplateSlots<(typeof engineErrorTemplates)[C]> extends never ? [] : [EngineErrorParams<C>]
): EngineError {
    return new EngineError(code, params ?? {});
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
