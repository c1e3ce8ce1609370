/**
 * How many bytes a drafter folder holds, and in which files: what `specdraft pack --max-bytes` and selfcheck's size
 * gate count (every byte of every file, at any depth, links followed so a linked model counts), and the largest
 * parts they name when a folder is over its cap.
 */
import { readdir, stat } from "node:fs/promises";
import path from "node:path";

/** One file of a folder, by its path inside it. */
export interface FolderPart {
    path: string;
    bytes: number;
}

/** Every file under `dir` with its size, largest first, and their total. */
export async function folderBytes(dir: string): Promise<{ total: number; parts: FolderPart[] }> {
    const parts: FolderPart[] = [];
    const walk = async (relative: string): Promise<void> => {
        for (const entry of await readdir(path.join(dir, relative))) {
            const inner = path.join(relative, entry);
            const info = await stat(path.join(dir, inner));
            if (info.isDirectory()) await walk(inner);
            else parts.push({ path: inner, bytes: info.size });
        }
    };
    await walk("");
    return { total: totalBytes(parts), parts: largestFirst(parts) };
}

/** The parts' total. */
export function totalBytes(parts: readonly FolderPart[]): number {
    return parts.reduce((sum, part) => sum + part.bytes, 0);
}

/** The parts, largest first (ties by path). */
function largestFirst(parts: readonly FolderPart[]): FolderPart[] {
    return [...parts].sort((a, b) => b.bytes - a.bytes || a.path.localeCompare(b.path));
}

/** `model.gguf 974,123,456 B, runtime/specdraft-runtime.tar.xz 37,000,000 B, … and 3 more (1,234 B)`. */
export function describeLargestParts(parts: readonly FolderPart[], count = 3): string {
    const sorted = largestFirst(parts);
    const named = sorted.slice(0, count).map((part) => `${part.path} ${formatByteCount(part.bytes)}`);
    const rest = sorted.slice(count);
    if (rest.length > 0) named.push(`and ${rest.length} more (${formatByteCount(totalBytes(rest))})`);
    return named.join(", ");
}

/** Bytes exactly, with thousands separators: `1,000,000,000 B`. */
export function formatByteCount(bytes: number): string {
    return `${bytes.toLocaleString("en-US")} B`;
}
