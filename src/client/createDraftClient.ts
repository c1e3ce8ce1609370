/**
 * Turns a `--server` argument into a client: `[NAME=]URL`, where URL is `http(s)://…` (specdraft's `/draft`) or
 * `llama-server+http(s)://…` (llama.cpp's `/completion`).
 */
import { createLlamaServerClient } from "./createLlamaServerClient.js";
import { createSpecdraftClient } from "./createSpecdraftClient.js";
import type { DraftClient } from "./types.js";

const llamaServerPrefix = "llama-server+";

/** How long one draft request may take before it counts as a failure. Defaults to `30000` ms. */
export const defaultTimeoutMs = 30_000;

/** Parses `spec`; throws an Error naming the problem when it is not a usable server URL. */
export function createDraftClient(spec: string, timeoutMs: number = defaultTimeoutMs): DraftClient {
    let name: string | undefined;
    let url = spec;
    const named = /^([A-Za-z0-9_.-]+)=(.+)$/.exec(spec);
    if (named) {
        name = named[1];
        url = named[2];
    }
    const isLlamaServer = url.startsWith(llamaServerPrefix);
    const baseUrl = isLlamaServer ? url.slice(llamaServerPrefix.length) : url;
    let parsed: URL;
    try {
        parsed = new URL(baseUrl);
    } catch {
        throw new Error(`--server ${JSON.stringify(spec)}: expected [NAME=]http://host:port or [NAME=]llama-server+http://host:port`);
    }
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:")
        throw new Error(`--server ${JSON.stringify(spec)}: expected an http(s) URL, found protocol ${parsed.protocol}`);
    const displayName = name ?? `${isLlamaServer ? "llama-server-" : ""}${parsed.hostname}-${parsed.port || (parsed.protocol === "https:" ? "443" : "80")}`;
    return isLlamaServer
        ? createLlamaServerClient(baseUrl, { name: displayName, timeoutMs, displayUrl: url })
        : createSpecdraftClient(baseUrl, { name: displayName, timeoutMs });
}
