/**
 * `specdraft pack`: turns a GGUF drafter into a self-describing folder (see drafterFolder.ts): the model, serve.sh,
 * architecture.json (from the GGUF's header) and data_manifest.json (checked, or one saying the sources are unknown),
 * with `--bundle` also the runtime serve.sh needs on a host without node or specdraft (bundleRuntime.ts). It refuses a
 * folder that would exceed `--max-bytes`, naming its largest parts, before writing anything.
 */
import { constants } from "node:fs";
import { chmod, copyFile, mkdir, mkdtemp, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { defaultDraftLength } from "../engine/engineDefaults.js";
import { describeGgufModel, type GgufHeader, type GgufModelDescription, readGgufHeader } from "../engine/gguf.js";
import { BundleError, type BundleGpu, bundleRuntime, type RuntimeBundleOptions } from "./bundleRuntime.js";
import { checkDataManifest, type DataManifest, unknownSourcesManifest } from "./dataManifest.js";
import {
    type ArchitectureFile,
    architectureFileName,
    dataManifestFileName,
    defaultMaxFolderBytes,
    drafterFolderFormat,
    type RuntimeDescription,
    runtimeArchiveName,
    serveScriptName,
} from "./drafterFolder.js";
import { describeLargestParts, type FolderPart, folderBytes, formatByteCount, totalBytes } from "./folderBytes.js";
import { renderServeScript } from "./renderServeScript.js";
import { sha256File } from "./sha256File.js";

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
    /** `NAME@REV`: the model the drafter was trained from, and its revision. Defaults to the GGUF's general.base_model, if any. */
    base?: string;
    /** Tokens drafted per request by default, recorded in architecture.json and passed to serve. Defaults to serve's, `16`. */
    draftLength?: number;
    /**
     * Prompt-lookup candidates per drafter step to serve with, recorded in architecture.json and passed to serve (0:
     * off). Defaults to none recorded: serve's default for its backend.
     */
    lookahead?: number;
    /** Write into a non-empty folder. Defaults to `false`. */
    force?: boolean;
    /** Largest folder, every byte of it; a larger one is refused. Defaults to `1000000000` (defaultMaxFolderBytes). */
    maxBytes?: number;
    /** Carry node, specdraft and llama.cpp in the folder (bundleRuntime.ts). Defaults to `false`. */
    bundle?: boolean;
    /** With `bundle`: engines to carry besides the CPU one, e.g. `["cuda"]`. Defaults to none. */
    bundleGpus?: readonly BundleGpu[];
    /** With `bundle`: what to bundle. Defaults to this specdraft (specdraftRoot), this node and xz's smallest setting. */
    bundleFrom?: Partial<RuntimeBundleOptions>;
}

/** What was written, and the warnings to print. */
export interface PackResult {
    dir: string;
    files: string[];
    architecture: ArchitectureFile;
    manifest: DataManifest;
    /** Every file of the folder and the total, which `maxBytes` bounded. */
    bytes: { total: number; max: number; parts: FolderPart[] };
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
    const maxBytes = options.maxBytes ?? defaultMaxFolderBytes;
    const base = options.base === undefined ? undefined : parseBase(options.base);

    const manifest = await readManifest(options.manifest, warnings);

    let header: GgufHeader;
    let description: GgufModelDescription;
    try {
        header = await readGgufHeader(options.model);
        description = describeGgufModel(header);
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
    await mkdir(path.dirname(path.resolve(options.out)), { recursive: true });

    // the runtime is built beside the folder first: only its size says whether the folder fits
    const staging = await mkdtemp(path.join(path.dirname(path.resolve(options.out)), ".specdraft-pack-"));
    try {
        const runtime =
            options.bundle || (options.bundleGpus?.length ?? 0) > 0
                ? await stageRuntime(options, path.join(staging, "runtime.tar.xz"), warnings)
                : null;

        const modelFile = path.basename(options.model);
        const version = specdraftVersion();
        const architecture: ArchitectureFile = {
            format: drafterFolderFormat,
            model_file: modelFile,
            model_name: description.modelName,
            architecture: description.architecture,
            base_model: baseModel,
            quantization: description.quantization,
            file_type: description.fileType,
            draft_length: draftLength,
            lookahead: options.lookahead ?? null,
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
            runtime,
            packed_by: `specdraft ${version}`,
            packed_at: new Date().toISOString(),
        };
        const texts: Record<string, string> = {
            [serveScriptName]: renderServeScript({
                modelFile,
                draftLength,
                lookahead: options.lookahead ?? null,
                runtime,
                specdraftVersion: version,
            }),
            [architectureFileName]: `${JSON.stringify(architecture, null, 2)}\n`,
            [dataManifestFileName]: `${JSON.stringify(manifest, null, 2)}\n`,
        };

        // the folder as it will be: what is there already (with --force) and is not replaced, and what is written
        const written: FolderPart[] = [
            { path: modelFile, bytes: description.sizeBytes },
            ...Object.entries(texts).map(([file, text]) => ({ path: file, bytes: Buffer.byteLength(text) })),
            ...(runtime ? [{ path: runtimeArchiveName, bytes: runtime.bytes }] : []),
        ];
        const kept = existing.length > 0 ? (await folderBytes(options.out)).parts : [];
        const parts = [...kept.filter((p) => !written.some((w) => w.path === p.path)), ...written];
        const total = totalBytes(parts);
        if (total > maxBytes)
            throw new PackError(
                `--out ${options.out} would hold ${formatByteCount(total)}, over --max-bytes ${formatByteCount(maxBytes)} ` +
                    `by ${formatByteCount(total - maxBytes)}; largest parts: ${describeLargestParts(parts)}` +
                    overCapHints(header, description, runtime),
            );

        await mkdir(options.out, { recursive: true });
        // a reflink where the file system has them, a plain copy elsewhere
        await copyFile(options.model, path.join(options.out, modelFile), constants.COPYFILE_FICLONE);
        for (const [file, text] of Object.entries(texts)) await writeFile(path.join(options.out, file), text);
        await chmod(path.join(options.out, serveScriptName), 0o755);
        if (runtime) {
            await mkdir(path.dirname(path.join(options.out, runtimeArchiveName)), { recursive: true });
            await rename(path.join(staging, "runtime.tar.xz"), path.join(options.out, runtimeArchiveName));
        }
        const folder = await folderBytes(options.out);
        return {
            dir: options.out,
            files: written.map((w) => path.join(options.out, w.path)),
            architecture,
            manifest,
            bytes: { total: folder.total, max: maxBytes, parts: folder.parts },
            warnings,
        };
    } finally {
        await rm(staging, { recursive: true, force: true });
    }
}

/** The data manifest `--manifest` names, checked; without one, a manifest saying the sources are not recorded. */
async function readManifest(file: string | undefined, warnings: string[]): Promise<DataManifest> {
    if (file === undefined) {
        warnings.push("no --manifest: data_manifest.json says the training sources are not recorded");
        return unknownSourcesManifest();
    }
    let parsed: unknown;
    try {
        parsed = JSON.parse(await readFile(file, "utf8"));
    } catch (error) {
        throw new PackError(`--manifest ${file}: ${(error as Error).message}`);
    }
    const checked = checkDataManifest(parsed);
    if (typeof checked === "string") throw new PackError(`--manifest ${file}: ${checked}`);
    return checked;
}

/** Builds the runtime archive `--bundle` asks for at `archive` (beside the folder, until the folder's size is known). */
async function stageRuntime(options: PackOptions, archive: string, warnings: string[]): Promise<RuntimeDescription> {
    let runtime: RuntimeDescription;
    try {
        runtime = await bundleRuntime(
            {
                root: options.bundleFrom?.root ?? specdraftRoot,
                nodeBinary: options.bundleFrom?.nodeBinary ?? process.execPath,
                gpus: options.bundleGpus ?? [],
                xzFilters: options.bundleFrom?.xzFilters,
            },
            archive,
            runtimeArchiveName,
        );
    } catch (error) {
        if (error instanceof BundleError) throw new PackError(`--bundle: ${error.message}`);
        throw error;
    }
    if (!runtime.node_stripped)
        warnings.push("--bundle: no working `strip` (binutils) here: node is bundled unstripped, ~3 MB larger");
    return runtime;
}

/** What would bring an over-cap folder under it, from what it holds. */
function overCapHints(
    header: GgufHeader,
    description: GgufModelDescription,
    runtime: RuntimeDescription | null,
): string {
    const hints: string[] = [];
    const embedding = header.tensors.find((t) => t.name === "token_embd.weight");
    if (description.quantization === "Q4_0" && embedding !== undefined && embedding.type !== "Q4_0")
        hints.push(
            `its token embedding is ${embedding.type}: an all-Q4_0 export (python -m specdraft_train export --embedding-type Q4_0) is smaller`,
        );
    if (runtime)
        hints.push(`without --bundle the runtime (${formatByteCount(runtime.bytes)}) comes from the host instead`);
    const text = hints.join("; ");
    return text ? `. ${text.charAt(0).toUpperCase()}${text.slice(1)}.` : ".";
}

/** `NAME@REV` → {name, revision}; the revision is required so the base is pinned. */
function parseBase(text: string): { name: string; revision: string } {
    const at = text.lastIndexOf("@");
    if (at <= 0 || at === text.length - 1)
        throw new PackError(`--base ${JSON.stringify(text)}: expected NAME@REV, e.g. Qwen/Qwen3-1.7B@70d244cc`);
    return { name: text.slice(0, at), revision: text.slice(at + 1) };
}

function specdraftVersion(): string {
    try {
        return (createRequire(import.meta.url)("../../package.json") as { version: string }).version;
    } catch {
        return "unknown";
    }
}
