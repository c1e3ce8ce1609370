/**
 * Draft clients, one per server protocol, and the `--server` argument that picks one: `[NAME=]URL`, where URL is
 * `http(s)://…` (specdraft's `POST /draft`) or `llama-server+http(s)://…` (llama.cpp's `POST /completion`). Both
 * adapters send through requestDraft.ts and differ only in the body they send and where the draft is in the answer.
 */
import { fetchServerInfo } from "./fetchServerInfo.js";
import { checkDraftIds, requestDraft } from "./requestDraft.js";
import type { DraftClient } from "./types.js";
import { withTrailingSlash } from "./withTrailingSlash.js";

const llamaServerPrefix = "llama-server+";

/*
 * The two per-request timeouts, side by side because they differ on purpose. validate and selfcheck measure a
 * drafter: 32 conversations at once against one server, a late answer scored as a failed draft that fails the run, so
 * they wait until only a hung server is late. generate races the target instead: a draft is worth having only before
 * the target could have made its tokens alone (milliseconds a token), so after 5 s the drafter counts as failing and
 * generation goes on without it (docs/generate.md).
 */
/** How long one draft request of validate and selfcheck may take before it counts as a failure. Defaults to `30000` ms. */
export const defaultTimeoutMs = 30_000;
/** How long one draft request of generate may take before the drafter counts as failing. Defaults to `5000` ms. */
export const defaultGenerateTimeoutMs = 5_000;

/** What every adapter needs besides the server's URL. */
export interface DraftClientOptions {
    /** Name shown in tables and used for report folders. */
    name: string;
    /** How long one request may take, whole answer included. No default: createDraftClient applies one. */
    timeoutMs: number;
}

/** Parses `spec`; throws an Error naming the problem when it is not a usable server URL. */
export function createDraftClient(spec: string, timeoutMs: number = defaultTimeoutMs): DraftClient {
    let name: string | undefined;
    let url = spec;
    const named = /^(?<name>[A-Za-z0-9_.-]+)=(?<url>.+)$/.exec(spec)?.groups;
    if (named?.name !== undefined && named.url !== undefined) {
        name = named.name;
        url = named.url;
    }
    const isLlamaServer = url.startsWith(llamaServerPrefix);
    const baseUrl = isLlamaServer ? url.slice(llamaServerPrefix.length) : url;
    let parsed: URL;
    try {
        parsed = new URL(baseUrl);
    } catch {
        throw new Error(
            `--server ${JSON.stringify(spec)}: expected [NAME=]http://host:port or [NAME=]llama-server+http://host:port`,
        );
    }
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:")
        throw new Error(`--server ${JSON.stringify(spec)}: expected an http(s) URL, found protocol ${parsed.protocol}`);
    const displayName =
        name ??
        `${isLlamaServer ? "llama-server-" : ""}${parsed.hostname}-${parsed.port || (parsed.protocol === "https:" ? "443" : "80")}`;
    return isLlamaServer
        ? createLlamaServerClient(baseUrl, { name: displayName, timeoutMs, displayUrl: url })
        : createSpecdraftClient(baseUrl, { name: displayName, timeoutMs });
}

/**
 * specdraft's own protocol: `POST {url}/draft {"tokens":[...], "n":k}` → `{"draft":[...]}`, and `GET {url}/info` for
 * what the drafter is. `baseUrl` is the server's root, e.g. `http://127.0.0.1:8000`.
 */
export function createSpecdraftClient(baseUrl: string, options: DraftClientOptions): DraftClient {
    const endpoint = new URL("draft", withTrailingSlash(baseUrl)).href;
    return {
        name: options.name,
        url: baseUrl,
        timeoutMs: options.timeoutMs,
        info: () => fetchServerInfo(baseUrl, options.timeoutMs),
        draft: (tokens, n, conversation) =>
            requestDraft(
                endpoint,
                { tokens, n },
                n,
                options.timeoutMs,
                (answer, k) => {
                    if (typeof answer !== "object" || answer === null || !("draft" in answer))
                        return `expected {"draft": [...]}, found ${JSON.stringify(answer).slice(0, 80)}`;
                    return checkDraftIds((answer as { draft: unknown }).draft, k, "draft");
                },
                conversation,
            ),
    };
}

/**
 * llama.cpp's `llama-server` as a draft server: `POST {url}/completion` with the prompt as token ids and greedy sampling
 * forced; the answer's `"tokens"` is the draft. `baseUrl` is llama-server's root, e.g. `http://127.0.0.1:8080` (without
 * the `llama-server+` prefix).
 */
function createLlamaServerClient(baseUrl: string, options: DraftClientOptions & { displayUrl?: string }): DraftClient {
    const endpoint = new URL("completion", withTrailingSlash(baseUrl)).href;
    return {
        name: options.name,
        url: options.displayUrl ?? baseUrl,
        timeoutMs: options.timeoutMs,
        draft: (tokens, n, conversation) =>
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
                    stream: false,
                },
                n,
                options.timeoutMs,
                (answer, k) => {
                    if (typeof answer !== "object" || answer === null || !("tokens" in answer))
                        return `expected {"tokens": [...]} (was "return_tokens" honoured?), found ${JSON.stringify(answer).slice(0, 80)}`;
                    return checkDraftIds((answer as { tokens: unknown }).tokens, k, "tokens");
                },
                conversation,
            ),
    };
}
