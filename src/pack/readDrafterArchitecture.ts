/**
 * Describes a GGUF drafter from its metadata (node-llama-cpp's readGgufFileInfo, no weights loaded) for the
 * architecture.json of a packed folder: architecture, shape, quantization, vocabulary fingerprint, size.
 */
import { createHash } from "node:crypto";
import { createReadStream } from "node:fs";
import { stat } from "node:fs/promises";
import { GgmlType, GgufFileType, readGgufFileInfo } from "node-llama-cpp";
import { vocabFingerprint } from "../engine/vocabFingerprint.js";

/** What the GGUF says about the drafter. */
export interface GgufDrafterDescription {
    /** `general.architecture`, e.g. `qwen3`. */
    architecture: string;
    /** `general.name`, when set. */
    modelName: string | null;
    /** `general.base_model.0.name` (and its version or repo), when set. */
    baseModel: { name: string; revision: string | null } | null;
    /** The type holding most weight elements, e.g. `Q4_0`. */
    quantization: string;
    /** `general.file_type` as named by llama.cpp, e.g. `MOSTLY_Q4_0`, when set. */
    fileType: string | null;
    vocabSize: number;
    /** sha256 hex of JSON.stringify(tokenizer.ggml.tokens), as `GET /info` reports it. */
    vocabFingerprint: string;
    contextLength: number | null;
    embeddingLength: number | null;
    blockCount: number | null;
    feedForwardLength: number | null;
    headCount: number | null;
    headCountKv: number | null;
    parameters: number;
    sizeBytes: number;
    sha256: string;
}

/** Reads `modelFile`'s metadata and hashes the file; throws when it has no architecture or vocabulary. */
export async function readDrafterArchitecture(modelFile: string): Promise<GgufDrafterDescription> {
    const info = await readGgufFileInfo(modelFile, { logWarnings: false, sourceType: "filesystem" });
    const metadata = info.metadata;
    const architecture = metadata.general?.architecture;
    if (typeof architecture !== "string") throw new Error(`${modelFile}: no general.architecture in its GGUF metadata`);
    const tokens = metadata.tokenizer?.ggml?.tokens;
    if (!Array.isArray(tokens))
        throw new Error(`${modelFile}: no tokenizer.ggml.tokens in its GGUF metadata, so its vocabulary is unknown`);
    const arch = info.architectureMetadata as Record<string, unknown> & { attention?: Record<string, unknown> };

    // quantization = the type of most weight elements (≥ 2-D tensors); norms stay F32 in any file
    const elementsByType = new Map<string, number>();
    let parameters = 0;
    for (const tensor of info.fullTensorInfo ?? info.tensorInfo ?? []) {
        const elements = tensor.dimensions.reduce<number>((product, d) => product * Number(d), 1);
        parameters += elements;
        if (tensor.dimensions.length < 2) continue;
        const type = GgmlType[tensor.ggmlType] ?? `type${tensor.ggmlType}`;
        elementsByType.set(type, (elementsByType.get(type) ?? 0) + elements);
    }
    const quantization = [...elementsByType].sort((a, b) => b[1] - a[1])[0]?.[0] ?? "unknown";

    const base = metadata.general?.base_model?.["0" as `${bigint}`] as
        | { name?: string; version?: string; repo_url?: string }
        | undefined;
    const fileType = metadata.general?.file_type;
    const [sizeBytes, sha256] = await Promise.all([stat(modelFile).then((s) => s.size), sha256File(modelFile)]);
    return {
        architecture,
        modelName: metadata.general?.name ?? null,
        baseModel: base?.name ? { name: base.name, revision: base.version ?? null } : null,
        quantization,
        fileType: fileType === undefined ? null : (GgufFileType[fileType] ?? String(fileType)),
        vocabSize: tokens.length,
        vocabFingerprint: vocabFingerprint(tokens as string[]),
        contextLength: numberOrNull(arch.context_length),
        embeddingLength: numberOrNull(arch.embedding_length),
        blockCount: numberOrNull(arch.block_count),
        feedForwardLength: numberOrNull(arch.feed_forward_length),
        headCount: numberOrNull(arch.attention?.head_count),
        headCountKv: numberOrNull(arch.attention?.head_count_kv),
        parameters,
        sizeBytes,
        sha256,
    };
}

function numberOrNull(value: unknown): number | null {
    if (typeof value === "number") return value;
    if (typeof value === "bigint") return Number(value);
    return null;
}

async function sha256File(file: string): Promise<string> {
    const hash = createHash("sha256");
    for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
    return hash.digest("hex");
}
