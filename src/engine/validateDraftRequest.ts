/**
 * What every DraftEngine checks before it drafts: the ids against the vocabulary, the end id, the prompt plus the draft
 * against the context size. The engine is the one place a request is checked against the model (the HTTP route only
 * checks the shape of the body), so every caller gets the same errors.
 */
import { type EngineError, engineError } from "./errors.js";
import type { EngineInfo } from "./types.js";

/**
 * The first problem of a draft of `n` tokens after `tokens` (ending at `endId`, if given) on a model described by
 * `info`: an EngineError, a RangeError for an `n` no caller may pass, or undefined when the engine can draft it.
 */
export function validateDraftRequest(
    info: Pick<EngineInfo, "vocabSize" | "contextSize">,
    tokens: readonly number[],
    n: number,
    endId: number | undefined,
): EngineError | RangeError | undefined {
    if (!Array.isArray(tokens) || tokens.length === 0) return engineError("empty_tokens", { field: "tokens" });
    const { vocabSize, contextSize } = info;
    const badIndex = tokens.findIndex((id) => !Number.isInteger(id) || id < 0 || id >= vocabSize);
    if (badIndex >= 0)
        return engineError("invalid_token", { id: String(tokens[badIndex]), position: `index ${badIndex}`, vocabSize });
    if (!Number.isInteger(n) || n < 0) return new RangeError(`Draft length must be an integer ≥ 0, got ${n}.`);
    if (endId !== undefined && (!Number.isInteger(endId) || endId < 0 || endId >= vocabSize))
        return engineError("invalid_token", { id: String(endId), position: "end_id", vocabSize });
    if (tokens.length + n > contextSize) {
        return engineError("context_overflow", { tokens: tokens.length, n, total: tokens.length + n, contextSize });
    }
    return undefined;
}
