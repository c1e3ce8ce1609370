/**
 * The fake drafters' knowledge: finds which test conversation a request's tokens belong to (each test prompt is
 * unique) and how far into its continuation the request is.
 */
import type { Conversation } from "../../src/validate/types.js";

export interface OracleHit {
    conversation: Conversation;
    /** pos: continuation tokens already in the request. */
    position: number;
}

export function locate(conversations: readonly Conversation[], tokens: readonly number[]): OracleHit | undefined {
    for (const conversation of conversations) {
        const prompt = conversation.promptTokens;
        const full = prompt.concat(conversation.continuationTokens);
        if (tokens.length < prompt.length || tokens.length > full.length) continue;
        if (tokens.every((token, i) => token === full[i]))
            return { conversation, position: tokens.length - prompt.length };
    }
    return undefined;
}

/** Filler drafted past the end of a continuation, and the wrong token planted at an error position. */
export const fillerToken = 7;
export const wrongToken = 99_999;

/**
 * The true continuation from `position`, `n` tokens (filler past the end), with a wrong token planted at draft index
 * `errorAt` when it is given and < n.
 */
export function draftWithPlantedError(
    conversation: Conversation,
    position: number,
    n: number,
    errorAt: number | undefined,
): number[] {
    const draft = Array.from({ length: n }, (_, i) => conversation.continuationTokens[position + i] ?? fillerToken);
    if (errorAt !== undefined && errorAt < n) draft[errorAt] = wrongToken;
    return draft;
}

export function conversation(id: string, promptFirst: number, length: number, category?: string): Conversation {
    const c: Conversation = {
        id,
        promptTokens: [promptFirst, 1, 2],
        // distinct, non-filler ids so a planted error or filler never matches by accident
        continuationTokens: Array.from({ length }, (_, i) => 1000 + promptFirst * 100 + i),
        lineNumber: 0,
    };
    if (category !== undefined) c.category = category;
    return c;
}
