/** Refuses a drafter whose vocabulary is not the target's: its token ids would stand for other text. */
import { GenerateError } from "./errors.js";

/** Throws `vocab_mismatch` naming both sides when the fingerprints differ. */
export function checkVocabularies(target: { label: string; fingerprint: string }, drafter: { label: string; fingerprint: string }): void {
    if (target.fingerprint === drafter.fingerprint) return;
    throw new GenerateError(
        "vocab_mismatch",
        `Vocabulary mismatch: the drafter ${drafter.label} has vocabulary fingerprint ${drafter.fingerprint.slice(0, 16)}…, ` +
            `expected the target ${target.label}'s ${target.fingerprint.slice(0, 16)}…. ` +
            "Speculative decoding needs a drafter built on the target's tokenizer."
    );
}
