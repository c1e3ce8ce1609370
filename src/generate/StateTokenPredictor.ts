/**
 * The base of specdraft's draft predictors (the HTTP drafter's, the lock-step draft model's, the in-process draft
 * engine's): a node-llama-cpp TokenPredictor that drafts from the tokens so far — the state node-llama-cpp hands over in
 * `reset()` and extends with `pushTokens()` — which is all of the generation they need to know. Subclasses implement
 * `predictTokens()` over `stateTokens`.
 */
import { type Token, TokenPredictor } from "node-llama-cpp";

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
