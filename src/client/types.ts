/** What a draft client is and what one draft request gives: the interface every server adapter implements. */
import type { ServerInfo } from "./fetchServerInfo.js";

/** Why a draft request did not give a usable draft. Each one is scored as an empty draft. */
export type DraftFailureKind =
    /** No answer within the timeout. */
    | "timeout"
    /** The server answered with a non-2xx status. */
    | "http"
    /** The connection failed (refused, reset). */
    | "network"
    /** A 2xx answer that was not the protocol's JSON (no draft array, non-integer ids, more ids than asked). */
    | "malformed";

/** Every DraftFailureKind, in the order summaries list them. */
export const draftFailureKinds: readonly DraftFailureKind[] = ["timeout", "http", "network", "malformed"];

/** What one draft request gave. */
export type DraftOutcome =
    | { ok: true; draft: number[]; latencyMs: number }
    | { ok: false; failure: DraftFailureKind; message: string; latencyMs: number };

/** A draft server speaking one protocol. */
export interface DraftClient {
    /** Short name for tables and report folders. */
    readonly name: string;
    /** The server's base URL as given (with its protocol prefix, if any). */
    readonly url: string;
    /** How long one request may take, whole answer included; longer counts as a `timeout` failure. */
    readonly timeoutMs: number;
    /**
     * Asks for `n` greedy draft tokens after `tokens`. `conversation` (src/client/conversationKey.ts) is sent as the
     * conversation header, so a proxy keeps the conversation's requests on one replica. Never throws: failures come
     * back as outcomes.
     */
    draft(tokens: readonly number[], n: number, conversation?: string): Promise<DraftOutcome>;
    /**
     * What the server's drafter is (vocabulary, context), for protocols that say (specdraft's `GET /info`; absent for
     * llama-server). Throws ServerInfoError naming what failed.
     */
    info?(): Promise<ServerInfo>;
}
