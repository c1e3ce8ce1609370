/**
 * One draft request over HTTP, shared by the protocol clients: POST a JSON body, wait at most `timeoutMs` for the
 * whole answer, and turn every way it can go wrong into a failure outcome instead of an exception.
 */
import type { DraftOutcome } from "./types.js";

/** Pulls the draft out of a 2xx JSON answer, or says why it cannot. */
export type DraftExtractor = (answer: unknown, n: number) => number[] | string;

export async function requestDraft(url: string, body: unknown, n: number, timeoutMs: number, extract: DraftExtractor): Promise<DraftOutcome> {
    const started = performance.now();
    const elapsed = (): number => performance.now() - started;
    const signal = AbortSignal.timeout(timeoutMs);
    let status: number;
    let text: string;
    try {
        const response = await fetch(url, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify(body),
            signal
        });
        status = response.status;
        text = await response.text();
    } catch (error) {
        if (signal.aborted) return { ok: false, failure: "timeout", message: `no answer within ${timeoutMs} ms`, latencyMs: elapsed() };
        return { ok: false, failure: "network", message: describeFetchError(error), latencyMs: elapsed() };
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

function describeFetchError(error: unknown): string {
    // undici hides the socket error (ECONNREFUSED, …) in `cause`
    const cause = (error as { cause?: { code?: string; message?: string } }).cause;
    if (cause?.code) return `${cause.code}${cause.message ? `: ${cause.message}` : ""}`;
    return error instanceof Error ? error.message : String(error);
}
