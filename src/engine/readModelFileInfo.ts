/**
 * What a GGUF file's header says about a drafter, for `EngineInfo`: name, architecture, vocabulary (size and
 * fingerprint) and weight format. Pure JS (node-llama-cpp's readGgufFileInfo reads only the header and tensor table),
 * so a missing or corrupt file is reported before llama.cpp is touched.
 */

import { stat } from "node:fs/promises";
import { basename } from "node:path";
import { GgmlType, readGgufFileInfo } from "node-llama-cpp";
import { EngineLoadError } from "./errors.js";
import { vocabFingerprint } from "./vocabFingerprint.js";

export interface ModelFileInfo {
    modelName: string;
    architecture: string;
    vocabSize: number;
    vocabFingerprint: string;
    /** The ggml type of most 2-D weight tensors, e.g. `Q4_0`. */
    quantization: string;
    fileBytes: number;
}

export async function readModelFileInfo(modelPath: string): Promise<ModelFileInfo> {
    let fileBytes: number;
    try {
        const stats = await stat(modelPath);
        if (!stats.isFile()) throw new EngineLoadError(`Model file ${modelPath} is not a regular file.`);
        fileBytes = stats.size;
    } catch (error) {
        if (error instanceof EngineLoadError) throw error;
        const code = (error as NodeJS.ErrnoException).code;
        throw new EngineLoadError(
            code === "ENOENT" ? `Model file ${modelPath} does not exist.` : `Model file ${modelPath} cannot be read (${code}).`,
        );
    }

    let info: Awaited<ReturnType<typeof readGgufFileInfo>>;
    try {
        info = await readGgufFileInfo(modelPath, { sourceType: "filesystem", logWarnings: false, spliceSplitFiles: false });
    } catch (error) {
        const reason = error instanceof Error ? error.message : String(error);
        throw new EngineLoadError(`Model file ${modelPath} is not a valid GGUF file: ${reason.replace(/[^\x20-\x7e]/g, "?")}`);
    }

    const tokens = info.metadata.tokenizer?.ggml?.tokens;
    if (!Array.isArray(tokens) || tokens.length === 0) {
        throw new EngineLoadError(`Model file ${modelPath} has no vocabulary (tokenizer.ggml.tokens).`);
    }
    return {
        modelName: info.metadata.general?.name ?? basename(modelPath),
        architecture: String(info.metadata.general?.architecture ?? "unknown"),
        vocabSize: tokens.length,
        vocabFingerprint: vocabFingerprint(tokens),
        quantization: mainWeightType(info.tensorInfo ?? []),
        fileBytes,
    };
}

/** The type most 2-D tensors have (ties: the one covering more elements); norms and biases are 1-D and do not count. */
function mainWeightType(tensors: readonly { dimensions: readonly (number | bigint)[]; ggmlType: GgmlType }[]): string {
    const byType = new Map<GgmlType, { count: number; elements: number }>();
    for (const t of tensors) {
        if (t.dimensions.length < 2) continue;
        const entry = byType.get(t.ggmlType) ?? { count: 0, elements: 0 };
        entry.count++;
        entry.elements += t.dimensions.reduce<number>((p, d) => p * Number(d), 1);
        byType.set(t.ggmlType, entry);
    }
    let best: GgmlType | undefined;
    for (const [type, entry] of byType) {
        const current = best === undefined ? undefined : byType.get(best)!;
        if (!current || entry.count > current.count || (entry.count === current.count && entry.elements > current.elements)) {
            best = type;
        }
    }
    return best === undefined ? "unknown" : (GgmlType[best] ?? `ggml type ${best}`);
}
