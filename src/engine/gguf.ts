/**
 * The one reader of GGUF files in specdraft, and the rules on what a header says. Every part that looks at a GGUF —
 * the engine and `GET /info`, `specdraft pack`'s architecture.json, `specdraft generate`'s vocabulary check — reads
 * it here, so they cannot disagree:
 *
 * - readGgufHeader: metadata and tensor table through node-llama-cpp's pure-JS readGgufFileInfo (no weights, no
 *   llama.cpp), with a missing, corrupt or truncated file reported in one line naming it (EngineLoadError);
 * - ggufQuantization: the file's quantization (below);
 * - vocabFingerprint / ggufVocabulary: which token ids mean which text;
 * - readModelFileInfo (the engine, generate) and describeGgufModel (pack): what they need from a file.
 */

import { createHash } from "node:crypto";
import { stat } from "node:fs/promises";
import { basename } from "node:path";
import { GgmlType, type GgufFileInfo, GgufFileType, readGgufFileInfo } from "node-llama-cpp";
import { EngineLoadError } from "./errors.js";

/** One tensor of the table: its name, ggml type name (e.g. `Q4_0`), shape in ggml order and element count. */
export interface GgufTensor {
    name: string;
    type: string;
    dimensions: number[];
    elements: number;
}

/** What a GGUF's header holds, read once. */
export interface GgufHeader {
    path: string;
    fileBytes: number;
    metadata: GgufFileInfo["metadata"];
    architectureMetadata: GgufFileInfo["architectureMetadata"];
    tensors: GgufTensor[];
}

/** Reads `path`'s header and tensor table; throws EngineLoadError (one line, naming the file) when it is unusable. */
export async function readGgufHeader(path: string): Promise<GgufHeader> {
    let fileBytes: number;
    try {
        const stats = await stat(path);
        if (!stats.isFile()) throw new EngineLoadError(`Model file ${path} is not a regular file.`);
        fileBytes = stats.size;
    } catch (error) {
        if (error instanceof EngineLoadError) throw error;
        const code = (error as NodeJS.ErrnoException).code;
        throw new EngineLoadError(
            code === "ENOENT" ? `Model file ${path} does not exist.` : `Model file ${path} cannot be read (${code}).`,
        );
    }
    let info: GgufFileInfo;
    try {
        info = await readGgufFileInfo(path, { sourceType: "filesystem", logWarnings: false, spliceSplitFiles: false });
    } catch (error) {
        const reason = error instanceof Error ? error.message : String(error);
        throw new EngineLoadError(`Model file ${path} is not a valid GGUF file: ${oneLine(reason)}`);
    }
    const tensors: GgufTensor[] = [];
    for (const tensor of info.tensorInfo ?? []) {
        const dimensions = tensor.dimensions.map(Number);
        const elements = dimensions.reduce((product, d) => product * d, 1);
        const block = ggmlTypeBlocks[tensor.ggmlType];
        // every tensor's data must lie inside the file: catches truncated downloads and copies
        const start = Number(tensor.fileOffset);
        const end = block === undefined ? start + 1 : start + Math.ceil(elements / block[1]) * block[0];
        if (end > fileBytes)
            throw new EngineLoadError(
                `Model file ${path} is truncated: tensor ${tensor.name} ends at byte ${end} but the file has ${fileBytes} bytes.`,
            );
        tensors.push({
            name: tensor.name,
            type: GgmlType[tensor.ggmlType] ?? `type${tensor.ggmlType}`,
            dimensions,
            elements,
        });
    }
    if (tensors.length === 0) throw new EngineLoadError(`Model file ${path} has no tensors.`);
    return { path, fileBytes, metadata: info.metadata, architectureMetadata: info.architectureMetadata, tensors };
}

/** Bytes and elements per block of the ggml types whose size we know (others are only offset-checked). */
const ggmlTypeBlocks: Readonly<Partial<Record<GgmlType, readonly [bytes: number, elements: number]>>> = {
    [GgmlType.F32]: [4, 1],
    [GgmlType.F16]: [2, 1],
    [GgmlType.Q4_0]: [18, 32],
    [GgmlType.Q4_1]: [20, 32],
    [GgmlType.Q5_0]: [22, 32],
    [GgmlType.Q5_1]: [24, 32],
    [GgmlType.Q8_0]: [34, 32],
    [GgmlType.Q2_K]: [84, 256],
    [GgmlType.Q3_K]: [110, 256],
    [GgmlType.Q4_K]: [144, 256],
    [GgmlType.Q5_K]: [176, 256],
    [GgmlType.Q6_K]: [210, 256],
    [GgmlType.BF16]: [2, 1],
};

/** The tensors of the transformer blocks (`blk.N.…`), whose 2-D ones are the matmul weights. */
const blockTensor = /^blk\.\d+\./;

/**
 * A file's quantization, e.g. `Q4_0` — the one rule `GET /info`, architecture.json and generate report: the ggml type
 * most matmul weights have (the 2-D tensors of the blocks; ties: the type covering more elements). The token embedding
 * and output head do not count: files keep them at another type (Q8_0 or Q6_K in a Q4_0 file), and in a
 * large-vocabulary model they hold the most elements, so counting them would name a Q4_0 file Q8_0. A file without
 * block tensors is what its `general.file_type` says (`MOSTLY_Q4_0` → `Q4_0`), else `unknown`.
 */
export function ggufQuantization(header: Pick<GgufHeader, "tensors" | "metadata">): string {
    const byType = new Map<string, { count: number; elements: number }>();
    for (const tensor of header.tensors) {
        if (tensor.dimensions.length < 2 || !blockTensor.test(tensor.name)) continue;
        const entry = byType.get(tensor.type) ?? { count: 0, elements: 0 };
        entry.count++;
        entry.elements += tensor.elements;
        byType.set(tensor.type, entry);
    }
    const [best] = [...byType].sort(([, a], [, b]) => b.count - a.count || b.elements - a.elements);
    if (best !== undefined) return best[0];
    return ggufFileType(header)?.replace(/^(MOSTLY|ALL)_/, "") ?? "unknown";
}

/** `general.file_type` as llama.cpp names it, e.g. `MOSTLY_Q4_0`; null when the file does not say. */
export function ggufFileType(header: Pick<GgufHeader, "metadata">): string | null {
    const fileType = header.metadata.general?.file_type;
    return fileType === undefined ? null : (GgufFileType[fileType] ?? String(fileType));
}

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
export function vocabFingerprint(tokens: readonly string[]): string {
    return createHash("sha256").update(JSON.stringify(tokens), "utf8").digest("hex");
}

/** A file's vocabulary: its size (0 ≤ id < size) and fingerprint. */
interface GgufVocabulary {
    size: number;
    /** sha256 (hex) of `tokenizer.ggml.tokens`: the value a specdraft server reports as `vocab_fingerprint`. */
    fingerprint: string;
}

/** The header's vocabulary; throws EngineLoadError when it has none (tokenizer.ggml.tokens). */
function ggufVocabulary(header: Pick<GgufHeader, "path" | "metadata">): GgufVocabulary {
    const tokens = header.metadata.tokenizer?.ggml?.tokens;
    if (!Array.isArray(tokens) || tokens.length === 0)
        throw new EngineLoadError(`Model file ${header.path} has no vocabulary (tokenizer.ggml.tokens).`);
    return { size: tokens.length, fingerprint: vocabFingerprint(tokens) };
}

/** What the engine reports about a model file (`EngineInfo`), and generate about its target and drafter; read before
 * llama.cpp is touched. */
export interface ModelFileInfo {
    /** `general.name`, or the file name. */
    modelName: string;
    architecture: string;
    vocabSize: number;
    vocabFingerprint: string;
    /** ggufQuantization's answer, e.g. `Q4_0`. */
    quantization: string;
    fileBytes: number;
}

/** Reads `path`'s name, vocabulary and quantization; `specdraft serve` calls it before it listens. */
export async function readModelFileInfo(path: string): Promise<ModelFileInfo> {
    const header = await readGgufHeader(path);
    const vocabulary = ggufVocabulary(header);
    return {
        modelName: header.metadata.general?.name ?? basename(path),
        architecture: String(header.metadata.general?.architecture ?? "unknown"),
        vocabSize: vocabulary.size,
        vocabFingerprint: vocabulary.fingerprint,
        quantization: ggufQuantization(header),
        fileBytes: header.fileBytes,
    };
}

/** A drafter as architecture.json describes it: what the header says about its model, shape and vocabulary. */
export interface GgufModelDescription {
    /** `general.architecture`, e.g. `qwen3`. */
    architecture: string;
    /** `general.name`, when set. */
    modelName: string | null;
    /** `general.base_model.0.name` (and its version), when set. */
    baseModel: { name: string; revision: string | null } | null;
    /** ggufQuantization's answer, e.g. `Q4_0`. */
    quantization: string;
    /** `general.file_type` as named by llama.cpp, e.g. `MOSTLY_Q4_0`, when set. */
    fileType: string | null;
    vocabSize: number;
    vocabFingerprint: string;
    contextLength: number | null;
    embeddingLength: number | null;
    blockCount: number | null;
    feedForwardLength: number | null;
    headCount: number | null;
    headCountKv: number | null;
    /** Elements of every tensor. */
    parameters: number;
    sizeBytes: number;
}

/** Describes the model `header` holds; throws EngineLoadError when it has no architecture or vocabulary. */
export function describeGgufModel(header: GgufHeader): GgufModelDescription {
    const metadata = header.metadata;
    const architecture = metadata.general?.architecture;
    if (typeof architecture !== "string")
        throw new EngineLoadError(`Model file ${header.path} has no general.architecture in its metadata.`);
    const vocabulary = ggufVocabulary(header);
    const arch = header.architectureMetadata as Record<string, unknown> & { attention?: Record<string, unknown> };
    const base = metadata.general?.base_model?.["0" as `${bigint}`] as { name?: string; version?: string } | undefined;
    return {
        architecture,
        modelName: metadata.general?.name ?? null,
        baseModel: base?.name ? { name: base.name, revision: base.version ?? null } : null,
        quantization: ggufQuantization(header),
        fileType: ggufFileType(header),
        vocabSize: vocabulary.size,
        vocabFingerprint: vocabulary.fingerprint,
        contextLength: numberOrNull(arch.context_length),
        embeddingLength: numberOrNull(arch.embedding_length),
        blockCount: numberOrNull(arch.block_count),
        feedForwardLength: numberOrNull(arch.feed_forward_length),
        headCount: numberOrNull(arch.attention?.head_count),
        headCountKv: numberOrNull(arch.attention?.head_count_kv),
        parameters: header.tensors.reduce((sum, t) => sum + t.elements, 0),
        sizeBytes: header.fileBytes,
    };
}

function numberOrNull(value: unknown): number | null {
    if (typeof value === "number") return value;
    if (typeof value === "bigint") return Number(value);
    return null;
}

/** The message on one printable line (a bad magic is quoted as raw bytes). */
function oneLine(text: string): string {
    return text
        .replace(/\s+/g, " ")
        .replace(/[^\x20-\x7e]/g, "?")
        .trim()
        .replace(/\.$/, "");
}
