/**
 * Walks a held-out set against one server: conversations run concurrently (a fixed pool of workers takes the next
 * conversation as it finishes one), each conversation's steps strictly in order.
 */
import { walkConversation } from "./walkConversation.js";
import type { DraftClient, DraftFailureKind } from "../client/types.js";
import type { Conversation, ConversationWalk, WalkResult } from "./types.js";

/** Conversations walked at once. Defaults to `32`. */
export const defaultConcurrency = 32;
/** Draft tokens asked for per request (k). Defaults to `16`. */
export const defaultDraftLength = 16;

export interface WalkHeldOutOptions {
    /** Draft tokens per request (k). Defaults to `16`. */
    draftLength?: number;
    /** Conversations walked at once. Defaults to `32`. */
    concurrency?: number;
    /** Called after every step with the tokens it advanced and its failure, if any (for progress bars). */
    onProgress?: (advanced: number, failure: DraftFailureKind | undefined) => void;
}

export async function walkHeldOut(conversations: readonly Conversation[], client: DraftClient, options: WalkHeldOutOptions = {}): Promise<WalkResult> {
    const draftLength = options.draftLength ?? defaultDraftLength;
    const concurrency = options.concurrency ?? defaultConcurrency;
    if (!Number.isInteger(draftLength) || draftLength < 1) throw new Error(`draft length: expected an integer ≥ 1, found ${draftLength}`);
    if (!Number.isInteger(concurrency) || concurrency < 1) throw new Error(`concurrency: expected an integer ≥ 1, found ${concurrency}`);

    const walks: ConversationWalk[] = new Array<ConversationWalk>(conversations.length);
    let next = 0;
    const worker = async (): Promise<void> => {
        while (next < conversations.length) {
            const index = next++;
            walks[index] = await walkConversation(conversations[index], client, draftLength, (step, advanced) =>
                options.onProgress?.(advanced, step.failure)
            );
        }
    };
    const started = performance.now();
    await Promise.all(Array.from({ length: Math.min(concurrency, conversations.length) }, worker));
    const servingSeconds = (performance.now() - started) / 1000;
    return {
        server: { name: client.name, url: client.url },
        draftLength,
        concurrency,
        timeoutMs: client.timeoutMs,
        conversations: walks,
        servingSeconds
    };
}
