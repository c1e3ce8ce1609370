/**
 * GreedyDraftTokenPredictor: a draft model through node-llama-cpp, drafting in lock-step with the verifier (the
 * exact-node-llama-cpp verifier's draft-model source; openLibraryDraftSource.ts opens it).
 */
import type { LlamaContextSequence, Token } from "node-llama-cpp";
import { StateTokenPredictor } from "../../src/generate/StateTokenPredictor.js";

/**
 * A TokenPredictor over an in-process draft model that drafts in lock-step with the verifier: each `predictTokens()`
 * aligns the draft sequence's KV cache with the tokens so far (keeping the common prefix, accepted drafts included)
 * and generates k greedy tokens; nothing runs in the background.
 *
 * Used by the exact-node-llama-cpp verifier instead of node-llama-cpp's DraftSequenceTokenPredictor, which (3.21.1)
 * stops drafting once its predictions are all consumed (a new draft iterator over zero pending tokens ends at once)
 * and then evaluates the next token without its last drafted one, so a perfect drafter loses every other step.
 */
export class GreedyDraftTokenPredictor extends StateTokenPredictor {
    private readonly draftSequence: LlamaContextSequence;
    private readonly draftLength: number;

    /** `draftSequence` belongs to the predictor from now on (it evaluates into it); `draftLength` is k. */
    constructor(draftSequence: LlamaContextSequence, draftLength: number) {
        super();
        this.draftSequence = draftSequence;
        this.draftLength = draftLength;
    }

    async predictTokens(): Promise<Token[]> {
        const state = this.stateTokens;
        if (state.length === 0) return [];
        const room = this.draftSequence.contextSize - state.length - 1;
        const length = Math.min(this.draftLength, room);
        if (length <= 0) return [];
        // the KV cache keeps what it shares with everything but the last token; the rest is evaluated below
        await this.draftSequence.adaptStateToTokens(state.slice(0, -1), false);
        const draft: Token[] = [];
        for await (const token of this.draftSequence.evaluate(state.slice(this.draftSequence.nextTokenIndex), {
            temperature: 0,
            yieldEogToken: true,
        })) {
            draft.push(token);
            if (draft.length >= length || this.draftSequence.model.isEogToken(token)) break;
        }
        return draft;
    }
}
