/** The vocabulary of a GGUF file (its size and fingerprint), read from its metadata without loading weights. */
import { readGgufFileInfo } from "node-llama-cpp";
import { vocabFingerprint } from "../engine/vocabFingerprint.js";

export interface GgufVocabulary {
    /** Number of token ids (0 ≤ id < size). */
    size: number;
    /** sha256 (hex) of `tokenizer.ggml.tokens`: the value a specdraft server reports as `vocab_fingerprint` in `/info`. */
    fingerprint: string;
}

export async function readGgufVocabulary(path: string): Promise<GgufVocabulary> {
    const info = await readGgufFileInfo(path, { readTensorInfo: false, logWarnings: false });
    const tokens = info.metadata.tokenizer?.ggml?.tokens;
    if (tokens === undefined) throw new Error(`${path} has no tokenizer.ggml.tokens: cannot tell its vocabulary`);
    return { size: tokens.length, fingerprint: vocabFingerprint(tokens) };
}
