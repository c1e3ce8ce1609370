/**
 * A node-llama-cpp TokenPredictor whose drafts come from a specdraft server: each prediction is one
 * `POST /draft {"tokens": <everything so far>, "n": k}`; the server reuses its KV cache for the shared prefix.
 *
 * A drafter that fails (unreachable, HTTP error, malformed answer, timeout) must not fail the generation: the first
 * failure is reported through `onFailure` and the predictor then offers no drafts, so the target carries on alone.
 */
import { type Token, TokenPredictor } from "node-llama-cpp";
import { createSpecdraftClient } from "../client/createDraftClient.js";
import type { DraftClient } from "../client/types.js";

/** How long one draft request may take before the drafter counts as failing. */
export const defaultDraftTimeoutMs = 5000;

export interface HttpDraftTokenPredictorOptions {
    /** The server's root URL, e.g. `http://127.0.0.1:8000`. */
    url: string;
    /** Draft tokens asked for per request (k). */
    draftLength: number;
    /** The target's vocabulary size: a draft id outside 0 ≤ id < vocabSize counts as a malformed answer. */
    vocabSize: number;
    /** Per-request timeout. Defaults to `5000` ms. */
    timeoutMs?: number;
    /** Called once, on the first failure, with a message naming the server and what went wrong. */
    onFailure?: (message: string) => void;
    /** Start without drafting (e.g. `/info` already failed). Defaults to `false`. */
    disabled?: boolean;
}

export class HttpDraftTokenPredictor extends TokenPredictor {
    private readonly client: DraftClient;
    private readonly draftLength: number;
    private readonly vocabSize: number;
    private readonly onFailure?: (message: string) => void;
    private stateTokens: Token[] = [];
    private failed: boolean;
    private requestCount = 0;

    constructor(options: HttpDraftTokenPredictorOptions) {
        super();
        this.client = createSpecdraftClient(options.url, {
            name: options.url,
            timeoutMs: options.timeoutMs ?? defaultDraftTimeoutMs,
        });
        this.draftLength = options.draftLength;
        this.vocabSize = options.vocabSize;
        this.onFailure = options.onFailure;
        this.failed = options.disabled ?? false;
    }

    /** True once the drafter failed: no more drafts are asked for. */
    get hasFailed(): boolean {
        return this.failed;
    }

    /** Draft requests sent. */
    get requests(): number {
        return this.requestCount;
    }

    reset({ stateTokens }: { stateTokens: Token[] }): void {
        this.stateTokens = stateTokens.slice();
    }

    pushTokens(tokens: Token[]): void {
        for (const token of tokens) this.stateTokens.push(token);
    }

    async predictTokens(): Promise<Token[]> {
        if (this.failed || this.stateTokens.length === 0) return [];
        this.requestCount++;
        const outcome = await this.client.draft(this.stateTokens, this.draftLength);
        if (!outcome.ok) return this.fail(`${outcome.failure}: ${outcome.message}`);
        const bad = outcome.draft.findIndex((id) => id >= this.vocabSize);
        if (bad >= 0)
            return this.fail(`malformed: draft[${bad}] = ${outcome.draft[bad]}, expected 0 ≤ id < ${this.vocabSize}`);
        return outcome.draft as Token[];
    }

    private fail(reason: string): Token[] {
        this.failed = true;
        this.onFailure?.(`drafter ${this.client.url} failed (${reason}); generating with the target alone`);
        return [];
    }
}
