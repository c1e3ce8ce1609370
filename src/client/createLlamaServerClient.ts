/**
 * Client for llama.cpp's `llama-server` as a draft server: `POST {url}/completion` with the prompt as token ids and
 * greedy sampling forced, answer's `"tokens"` is the draft.
 */
import { withTrailingSlash, type DraftClientOptions } from "./createSpecdraftClient.js";
import { checkDraftIds, requestDraft } from "./requestDraft.js";
import type { DraftClient } from "./types.js";

/** `baseUrl` is llama-server's root, e.g. `http://127.0.0.1:8080` (without the `llama-server+` prefix). */
export function createLlamaServerClient(baseUrl: string, options: DraftClientOptions & { displayUrl?: string }): DraftClient {
    const endpoint = new URL("completion", withTrailingSlash(baseUrl)).href;
    return {
        name: options.name,
        url: options.displayUrl ?? baseUrl,
        timeoutMs: options.timeoutMs,
        draft: (tokens, n) =>
            requestDraft(
                endpoint,
                {
                    prompt: tokens,
                    n_predict: n,
                    // temperature 0 alone is greedy in llama-server; top_k 1 as the only sampler keeps it greedy even
                    // if the server was started with other sampler defaults
                    temperature: 0,
                    top_k: 1,
                    samplers: ["top_k"],
                    return_tokens: true,
                    cache_prompt: true,
                    stream: false
                },
                n,
                options.timeoutMs,
                (answer, k) => {
                    if (typeof answer !== "object" || answer === null || !("tokens" in answer))
                        return `expected {"tokens": [...]} (was "return_tokens" honoured?), found ${JSON.stringify(answer).slice(0, 80)}`;
                    return checkDraftIds((answer as { tokens: unknown }).tokens, k, "tokens");
                }
            )
    };
}
