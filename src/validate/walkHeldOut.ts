/**
 * The validator's walk, exactly as speculative decoding with a greedy target would advance through a conversation:
 *
 *     pos = 0
 *     while pos < L:
 *         d = draft(P + C[0:pos], k)
 *         a = leading i < min(k, L − pos) with d[i] == C[pos + i]   (stops at the first mismatch)
 *         pos += min(a + 1, L − pos)                                (the target's own token comes free)
 *         steps += 1
 *
 * A failed, timed-out or malformed answer is scored as an empty draft (a = 0) and recorded with its failure kind.
 * A held-out set is walked against one server with conversations running concurrently (a fixed pool of workers takes
 * the next conversation as it finishes one), each conversation's steps strictly in order. Each conversation's requests
 * carry one conversation key, so a proxy in front of several replicas keeps them on one (docs/deploy.md).
 */
import { newConversationKey } from "../client/conversationKey.js";
import type { DraftClient, DraftFailureKind } from "../client/types.js";
import type { Conversation, ConversationWalk, WalkResult, WalkStep } from "./types.js";

/** Conversations walked at once. Defaults to `32`. */
export const defaultConcurrency = 32;

/**
 * How to walk: draft length, concurrency, progress. The values are the caller's, already resolved (validate's and
 * selfcheck's commands apply defaultDraftLength and defaultConcurrency once, at their entry).
 */
export interface WalkHeldOutOptions {
    /** Draft tokens per request (k). */
    draftLength: number;
    /** Conversations walked at once. */
    concurrency: number;
    /** Called after every step with the tokens it advanced and its failure, if any (for progress bars). */
    onProgress?: (advanced: number, failure: DraftFailureKind | undefined) => void;
}

/** Walks every conversation against `client`; the result keeps them in input order. */
export async function walkHeldOut(
    conversations: readonly Conversation[],
    client: DraftClient,
    options: WalkHeldOutOptions,
): Promise<WalkResult> {
    const { draftLength, concurrency } = options;
    if (!Number.isInteger(draftLength) || draftLength < 1)
        throw new Error(`draft length: expected an integer ≥ 1, found ${draftLength}`);
    if (!Number.isInteger(concurrency) || concurrency < 1)
        throw new Error(`concurrency: expected an integer ≥ 1, found ${concurrency}`);

    const walks: ConversationWalk[] = new Array<ConversationWalk>(conversations.length);
    // one iterator shared by the workers: each takes the next conversation when it finishes one
    const pending = conversations.entries();
    const worker = async (): Promise<void> => {
        for (const [index, conversation] of pending) {
            walks[index] = await walkConversation(conversation, client, draftLength, (step, advanced) =>
                options.onProgress?.(advanced, step.failure),
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
        servingSeconds,
    };
}

/** Walks `conversation` against `client` with drafts of `draftLength` tokens; calls `onStep` after each step. */
async function walkConversation(
    conversation: Conversation,
    client: DraftClient,
    draftLength: number,
    onStep?: (step: WalkStep, advanced: number) => void,
): Promise<ConversationWalk> {
    const prompt = conversation.promptTokens;
    const continuation = conversation.continuationTokens;
    const length = continuation.length;
    const steps: WalkStep[] = [];
    const key = newConversationKey();
    let pos = 0;
    while (pos < length) {
        const context = prompt.concat(continuation.slice(0, pos));
        const outcome = await client.draft(context, draftLength, key);
        const cap = Math.min(draftLength, length - pos);
        const draft = outcome.ok ? outcome.draft : [];
        let accepted = 0;
        while (accepted < cap && accepted < draft.length && draft[accepted] === continuation[pos + accepted])
            accepted++;
        const advanced = Math.min(accepted + 1, length - pos);
        pos += advanced;
        const step: WalkStep = { accepted, cap, latencyMs: outcome.latencyMs };
        if (!outcome.ok) step.failure = outcome.failure;
        steps.push(step);
        onStep?.(step, advanced);
    }
    const walk: ConversationWalk = { id: conversation.id, tokens: length, steps };
    if (conversation.category !== undefined) walk.category = conversation.category;
    return walk;
}
