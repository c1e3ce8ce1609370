/**
 * The vocabulary fingerprint: equal fingerprints mean the same token ids stand for the same text, so a drafter and a
 * target (or a drafter and a held-out set) can be checked for compatibility without comparing whole vocabularies.
 *
 * Definition: sha256, as lowercase hex, of the UTF-8 bytes of `JSON.stringify(tokens)`, where `tokens` is the GGUF's
 * `tokenizer.ggml.tokens` array in id order. Python computes the same string with
 *
 *     json.dumps(tokens, ensure_ascii=False, separators=(",", ":"))
 *
 * (both escape only `"`, `\` and control characters, with the same escapes: `\n`, `\t`, …, `\u001f`), then
 * `hashlib.sha256(s.encode("utf-8")).hexdigest()`. Byte-level BPE vocabularies (GPT-2, Qwen) are plain printable
 * strings, so there is nothing else to agree on.
 */
import { createHash } from "node:crypto";

/** sha256 (hex) of the UTF-8 JSON of the GGUF's `tokenizer.ggml.tokens` array. */
export function vocabFingerprint(tokens: readonly string[]): string {
    return createHash("sha256").update(JSON.stringify(tokens), "utf8").digest("hex");
}
