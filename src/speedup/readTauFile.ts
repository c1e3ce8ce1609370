/**
 * Reads τ(k), the tokens a target step yields with drafts of k, from the evaluation's JSON file, in one of two forms:
 *
 *   {"tau_by_k": {"1": 1.8, "2": 2.4, "4": 3.1, "8": 3.9, "16": 4.6}}   τ measured at each k
 *   {"tau": 4.6, "k": 16}                                                 one τ (k defaults to 16)
 *
 * A k the file does not give is derived from the largest k it gives: the per-token agreement a that τ implies,
 * inverting τ(k) = (1 − a^(k+1)) ÷ (1 − a), and τ(k) at a (the figure says it was derived).
 */
import { readFile } from "node:fs/promises";
import { agreementFromTau, expectedTokensPerStep } from "./speedUpModel.js";

/** The k the single-τ form means when it names none. Defaults to `16`. */
export const defaultTauDraftLength = 16;

/** A τ file that cannot be read or used; the message names the file and what was expected. */
export class TauFileError extends Error {
    constructor(message: string) {
        super(message);
        this.name = "TauFileError";
    }
}

/** τ(k) for the k asked for, and where each came from. */
export interface TauByK {
    /** τ(k) by k. */
    tau: ReadonlyMap<number, number>;
    /** The k whose τ was derived from `derivedFrom`'s, not read. */
    derived: ReadonlySet<number>;
    /** The τ the derived ones come from, and the per-token agreement it implies (absent: none derived). */
    derivedFrom?: { k: number; tau: number; agreement: number };
}

/** The file's τ by k, checked: every k an integer ≥ 1, every τ(k) a number in [1, k + 1]. */
export function parseTauJson(json: unknown, file: string): Map<number, number> {
    const given = new Map<number, number>();
    const add = (key: string | number, value: unknown) => {
        const k = Number(key);
        if (!Number.isInteger(k) || k < 1) throw new TauFileError(`${file}: expected k an integer ≥ 1, found ${key}.`);
        if (typeof value !== "number" || !(value >= 1 && value <= k + 1))
            throw new TauFileError(
                `${file}: τ(${k}) must be a number in [1, ${k + 1}], found ${JSON.stringify(value)}.`,
            );
        given.set(k, value);
    };
    const record = typeof json === "object" && json !== null ? (json as Record<string, unknown>) : {};
    const byK = record.tau_by_k;
    if (typeof byK === "object" && byK !== null && !Array.isArray(byK))
        for (const [key, value] of Object.entries(byK)) add(key, value);
    else if ("tau" in record) add((record.k as number | undefined) ?? defaultTauDraftLength, record.tau);
    if (given.size === 0)
        throw new TauFileError(`${file}: expected {"tau_by_k": {"<k>": τ, …}} or {"tau": τ, "k": k}, found neither.`);
    return given;
}

/** τ(k) for each of `draftLengths` from the file's figures (see the header). */
export function tauForDraftLengths(given: ReadonlyMap<number, number>, draftLengths: readonly number[]): TauByK {
    const tau = new Map<number, number>();
    const derived = new Set<number>();
    const fromK = Math.max(...given.keys());
    const fromTau = given.get(fromK) ?? 1;
    const agreement = agreementFromTau(fromTau, fromK);
    for (const k of draftLengths) {
        const read = given.get(k);
        if (read !== undefined) tau.set(k, read);
        else {
            tau.set(k, expectedTokensPerStep(agreement, k));
            derived.add(k);
        }
    }
    return derived.size === 0 ? { tau, derived } : { tau, derived, derivedFrom: { k: fromK, tau: fromTau, agreement } };
}

/** Reads and checks `file`, then τ(k) for each of `draftLengths`. Throws TauFileError. */
export async function readTauFile(file: string, draftLengths: readonly number[]): Promise<TauByK> {
    let text: string;
    try {
        text = await readFile(file, "utf8");
    } catch (error) {
        throw new TauFileError(`cannot read the τ file ${file}: ${(error as NodeJS.ErrnoException).code ?? error}.`);
    }
    let json: unknown;
    try {
        json = JSON.parse(text);
    } catch (error) {
        throw new TauFileError(`${file}: not JSON (${(error as Error).message}).`);
    }
    return tauForDraftLengths(parseTauJson(json, file), draftLengths);
}
