/**
 * `specdraft pack`: turns a GGUF drafter into a self-describing folder (see drafterFolder.ts): the model, serve.sh,
 * architecture.json (from the GGUF's metadata) and data_manifest.json (checked, or one saying the sources are unknown).
 */
import { createHash } from "node:crypto";
import { constants, createReadStream } from "node:fs";
import { chmod, copyFile, mkdir, readdir, readFile, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { describeGgufModel, type GgufModelDescription, readGgufHeader } from "../engine/gguf.js";
import { defaultDraftLength } from "../server/serveDefaults.js";
import { checkDataManifest, type DataManifest, unknownSourcesManifest } from "./dataManifest.js";
import {
    type ArchitectureFile,
    architectureFileName,
    dataManifestFileName,
    drafterFolderFormat,
    serveScriptName,
} from "./drafterFolder.js";
import { renderServeScript } from "./renderServeScript.js";

/** The specdraft checkout or package this code runs from (src/pack/ or dist/pack/ → its root). */
export const specdraftRoot = path.resolve(fileURLToPath(new URL("../../", import.meta.url)));

/** What `specdraft pack` is given. */
export interface PackOptions {
    /** The GGUF drafter. */
    model: string;
    /** Folder to write; it must be empty or absent unless `force`. */
    out: string;
    /** data_manifest.json to check and include. Defaults to one saying the sources are unknown. */
    manifest?: string;
    /** `NAME@REV`: the base (target family) model and its revision. Defaults to the GGUF's general.base_model, if any. */
    base?: string;
    /** Tokens drafted per request by default, recorded in architecture.json and passed to serve. Defaults to serve's, `16`. */
    draftLength?: number;
    /** Write into a non-empty folder. Defaults to `false`. */
    force?: boolean;
    /** The checkout serve.sh falls back to. Defaults to the one running this code. */
    packedFrom?: string | null;
}

/** What was written, and the warnings to print. */
export interface PackResult {
    dir: string;
    files: string[];
    architecture: ArchitectureFile;
    manifest: DataManifest;
    warnings: string[];
}

/** Thrown for bad input; the message names the problem. */
export class PackError extends Error {
    override name = "PackError";
}

/** Writes the folder; throws PackError naming the problem for bad input (nothing is written then). */
export async function packDrafter(options: PackOptions): Promise<PackResult> {
    const warnings: string[] = [];
    const draftLength = options.draftLength ?? defaultDraftLength;
    const base = options.base === undefined ? undefined : parseBase(options.base);

    let manifest: DataManifest;
    if (options.manifest === undefined) {
        manifest = unknownSourcesManifest();
        warnings.push("no --manifest: data_manifest.json says the training sources are not recorded");
    } else {
        let parsed: unknown;
        try {
            parsed = JSON.parse(await readFile(options.manifest, "utf8"));
        } catch (error) {
            throw new PackError(`--manifest ${options.manifest}: ${(error as Error).message}`);
        }
        const checked = checkDataManifest(parsed);
        if (typeof checked === "string") throw new PackError(`--manifest ${options.manifest}: ${checked}`);
        manifest = checked;
    }

    let description: GgufModelDescription;
    try {
        description = describeGgufModel(await readGgufHeader(options.model));
    } catch (error) {
        throw new PackError(`--model ${options.model}: ${(error as Error).message}`);
    }
    const baseModel = base ?? description.baseModel;
    if (baseModel === null)
        warnings.push(
            "no --base NAME@REV and no general.base_model in the GGUF: architecture.json has base_model null",
        );

    const existing = await readdir(options.out).catch(() => [] as string[]);
    if (existing.length > 0 && !options.force)
        throw new PackError(
            `--out ${options.out}: folder is not empty (${existing.length} entries); use --force to write into it`,
        );
    await mkdir(options.out, { recursive: true });

    const modelFile = path.basename(options.model);
    // a reflink where the file system has them, a plain copy elsewhere
    await copyFile(options.model, path.join(options.out, modelFile), constants.COPYFILE_FICLONE);
    const architecture: ArchitectureFile = {
        format: drafterFolderFormat,
        model_file: modelFile,
        model_name: description.modelName,
        architecture: description.architecture,
        base_model: baseModel,
        quantization: description.quantization,
        file_type: description.fileType,
        draft_length: draftLength,
        vocab_size: description.vocabSize,
        vocab_fingerprint: description.vocabFingerprint,
        context_length: description.contextLength,
        embedding_length: description.embeddingLength,
        block_count: description.blockCount,
        feed_forward_length: description.feedForwardLength,
        head_count: description.headCount,
        head_count_kv: description.headCountKv,
        parameters: description.parameters,
        size_bytes: description.sizeBytes,
        model_sha256: await sha256File(options.model),
        packed_by: `specdraft ${specdraftVersion()}`,
        packed_at: new Date().toISOString(),
    };
    await writeFile(path.join(options.out, architectureFileName), `${JSON.stringify(architecture, null, 2)}\n`);
    await writeFile(path.join(options.out, dataManifestFileName), `${JSON.stringify(manifest, null, 2)}\n`);
    const serveScript = path.join(options.out, serveScriptName);
    await writeFile(
        serveScript,
        renderServeScript({
            modelFile,
            draftLength,
            packedFrom: options.packedFrom === undefined ? specdraftRoot : options.packedFrom,
        }),
    );
    await chmod(serveScript, 0o755);
    return {
        dir: options.out,
        files: [modelFile, serveScriptName, architectureFileName, dataManifestFileName].map((f) =>
            path.join(options.out, f),
        ),
        architecture,
        manifest,
        warnings,
    };
}

/** `NAME@REV` → {name, revision}; the revision is required so the base is pinned. */
export function parseBase(text: string): { name: string; revision: string } {
    const at = text.lastIndexOf("@");
    if (at <= 0 || at === text.length - 1)
        throw new PackError(`--base ${JSON.stringify(text)}: expected NAME@REV, e.g. Qwen/Qwen3-8B@b968826`);
    return { name: text.slice(0, at), revision: text.slice(at + 1) };
}

async function sha256File(file: string): Promise<string> {
    const hash = createHash("sha256");
    for await (const chunk of createReadStream(file)) hash.update(chunk as Buffer);
    return hash.digest("hex");
}

function specdraftVersion(): string {
    try {
        return (createRequire(import.meta.url)("../../package.json") as { version: string }).version;
    } catch {
        return "unknown";
    }
}
