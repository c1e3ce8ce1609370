/**
 * The validator's walk over one conversation, exactly as speculative decoding with a greedy target would advance:
 *
 *     pos = 0
 *     while pos < L:
 *         d = draft(P + C[0:pos], k)
 *         a = leading i < min(k, L − pos) with d[i] == C[pos + i]   (stops at the first mismatch)
 *         pos += min(a + 1, L − pos)                                (the target's own token comes free)
 *         steps += 1
 *
 * A failed, timed-out or malformed answer is scored as an empty draft (a = 0) and recorded with its failure kind.
 */
import type { DraftClient } from "../client/types.js";
import type { Conversation, ConversationWalk, WalkStep } from "./types.js";

/** Walks `conversation` against `client` with drafts of `draftLength` tokens; calls `onStep` after each step. */
export async function walkConversation(
    conversation: Conversation,
    client: DraftClient,
    draftLength: number,
    onStep?: (step: WalkStep, advanced: number) => void
): Promise<ConversationWalk> {
    const prompt = conversation.promptTokens;
    const continuation = conversation.continuationTokens;
    const length = continuation.length;
    const steps: WalkStep[] = [];
    let pos = 0;
    while (pos < length) {
        const context = prompt.concat(continuation.slice(0, pos));
        const outcome = await client.draft(context, draftLength);
        const cap = Math.min(draftLength, length - pos);
        const draft = outcome.ok ? outcome.draft : [];
        let accepted = 0;
        while (accepted < cap && accepted < draft.length && draft[accepted] === continuation[pos + accepted]) accepted++;
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
