/**
 * One draft request over HTTP, shared by the protocol clients: POST a JSON body, wait at most `timeoutMs` for the
 * whole answer, and turn every way it can go wrong into a failure outcome instead of an exception.
 *
 * Requests go through node:http on a keep-alive agent rather than fetch: a draft is one small request per target step,
 * and fetch (undici) costs about 1 ms more per request (2026-11-30, 2-core CPU, loopback: 1.8–2.1 ms vs 0.8–0.9 ms for
 * a 400-token /draft answered without drafting) — a tenth of a speculative step on the H200 with the lab pair.
 */
import http from "node:http";
import https from "node:https";
import { conversationHeader } from "./conversationKey.js";
import type { DraftOutcome } from "./types.js";

/** Pulls the draft out of a 2xx JSON answer, or says why it cannot. */
export type DraftExtractor = (answer: unknown, n: number) => number[] | string;

const transports = {
    http: { request: http.request, agent: new http.Agent({ keepAlive: true }) },
    https: { request: https.request, agent: new https.Agent({ keepAlive: true }) },
};

/**
 * POSTs `body` to `url` (with the conversation header when `conversation` is given) and pulls at most `n` draft ids out
 * of the answer with `extract`; never throws.
 */
export async function requestDraft(
    url: string,
    body: unknown,
    n: number,
    timeoutMs: number,
    extract: DraftExtractor,
    conversation?: string,
): Promise<DraftOutcome> {
    const started = performance.now();
    const elapsed = (): number => performance.now() - started;
    const signal = AbortSignal.timeout(timeoutMs);
    let status: number;
    let text: string;
    try {
        ({ status, text } = await post(new URL(url), JSON.stringify(body), signal, conversation));
    } catch (error) {
        if (signal.aborted)
            return { ok: false, failure: "timeout", message: `no answer within ${timeoutMs} ms`, latencyMs: elapsed() };
        return { ok: false, failure: "network", message: describeRequestError(error), latencyMs: elapsed() };
    }
    const latencyMs = elapsed();
    if (status < 200 || status > 299)
        return { ok: false, failure: "http", message: `HTTP ${status}: ${text.slice(0, 200)}`, latencyMs };
    let answer: unknown;
    try {
        answer = JSON.parse(text);
    } catch {
        return { ok: false, failure: "malformed", message: `answer is not JSON: ${text.slice(0, 80)}`, latencyMs };
    }
    const draft = extract(answer, n);
    if (typeof draft === "string") return { ok: false, failure: "malformed", message: draft, latencyMs };
    return { ok: true, draft, latencyMs };
}

/** POSTs `json` and resolves with the status and the whole body; rejects on a socket error or when `signal` aborts. */
function post(
    url: URL,
    json: string,
    signal: AbortSignal,
    conversation: string | undefined,
): Promise<{ status: number; text: string }> {
    const transport = url.protocol === "https:" ? transports.https : transports.http;
    return new Promise((resolve, reject) => {
        const request = transport.request(
            url,
            {
                method: "POST",
                agent: transport.agent,
                signal,
                headers: {
                    "content-type": "application/json",
                    "content-length": Buffer.byteLength(json),
                    ...(conversation === undefined ? {} : { [conversationHeader]: conversation }),
                },
            },
            (response) => {
                const chunks: Buffer[] = [];
                response.on("data", (chunk: Buffer) => chunks.push(chunk));
                response.on("error", reject);
                response.on("end", () =>
                    resolve({ status: response.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }),
                );
            },
        );
        request.on("error", reject);
        request.end(json);
    });
}

/** Checks that `value` is a list of at most `n` token ids; returns it or a message saying what was wrong. */
export function checkDraftIds(value: unknown, n: number, field: string): number[] | string {
    if (!Array.isArray(value)) return `"${field}": expected an array of token ids, found ${typeof value}`;
    if (value.length > n) return `"${field}": expected at most ${n} token ids, found ${value.length}`;
    for (let i = 0; i < value.length; i++) {
        const id: unknown = value[i];
        if (typeof id !== "number" || !Number.isSafeInteger(id) || id < 0)
            return `"${field}"[${i}]: expected an integer ≥ 0, found ${JSON.stringify(id)}`;
    }
    return value as number[];
}

function describeRequestError(error: unknown): string {
    const code = (error as { code?: unknown }).code;
    const message = error instanceof Error ? error.message : String(error);
    return typeof code === "string" && !message.includes(code) ? `${code}: ${message}` : message;
}
