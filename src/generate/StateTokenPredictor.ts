/**
 * The base of specdraft's draft predictors (the HTTP drafter's, the in-process draft engine's, the bench's lock-step
 * draft model's): a node-llama-cpp TokenPredictor that drafts from the tokens so far — the state node-llama-cpp hands
 * over in `reset()` and extends with `pushTokens()` — which is all of the generation they need to know. Subclasses
 * implement `predictTokens()` over `stateTokens`.
 */
import { type Token, TokenPredictor } from "node-llama-cpp";

/**
 * Any TokenPredictor that drafts from the state tokens alone, so its reset() needs no target sequence: the
 * StateTokenPredictor subclasses and node-llama-cpp's InputLookupTokenPredictor, not its DraftSequenceTokenPredictor
 * (which drafts beside the target's sequence). The native target, which has no node-llama-cpp sequence, takes only
 * these. `reset` is a property here, not a method, so TypeScript checks its parameter strictly and a predictor whose
 * reset needs the sequence is not one.
 */
export type StateOnlyTokenPredictor = TokenPredictor & {
    reset: (params: { stateTokens: Token[] }) => Promise<void> | void;
};

export abstract class StateTokenPredictor extends TokenPredictor {
    private tokens: Token[] = [];

    /** The prompt and every token the target accepted since, in order. */
    protected get stateTokens(): readonly Token[] {
        return this.tokens;
    }

    reset({ stateTokens }: { stateTokens: Token[] }): void {
        this.tokens = stateTokens.slice();
    }

    pushTokens(tokens: Token[]): void {
        for (const token of tokens) this.tokens.push(token);
    }
}
