/** Client for specdraft's own protocol: `POST {url}/draft {"tokens":[...], "n":k}` → `{"draft":[...]}`. */
import { checkDraftIds, requestDraft } from "./requestDraft.js";
import type { DraftClient } from "./types.js";

export interface DraftClientOptions {
    /** Name shown in tables and used for report folders. */
    name: string;
    /** How long one request may take, whole answer included. No default: createDraftClient applies one. */
    timeoutMs: number;
}

/** `baseUrl` is the server's root, e.g. `http://127.0.0.1:8000`. */
export function createSpecdraftClient(baseUrl: string, options: DraftClientOptions): DraftClient {
    const endpoint = new URL("draft", withTrailingSlash(baseUrl)).href;
    return {
        name: options.name,
        url: baseUrl,
        timeoutMs: options.timeoutMs,
        draft: (tokens, n) =>
            requestDraft(endpoint, { tokens, n }, n, options.timeoutMs, (answer, k) => {
                if (typeof answer !== "object" || answer === null || !("draft" in answer))
                    return `expected {"draft": [...]}, found ${JSON.stringify(answer).slice(0, 80)}`;
                return checkDraftIds((answer as { draft: unknown }).draft, k, "draft");
            })
    };
}

export function withTrailingSlash(url: string): string {
    return url.endsWith("/") ? url : `${url}/`;
}
