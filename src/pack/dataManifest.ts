/**
 * data_manifest.json of a drafter folder: every training source with a pinned revision or content hash and the split
 * it fed. `checkDataManifest` says whether a manifest is well-formed, naming the first problem.
 *
 *     {"format": "specdraft-data-manifest/1", "complete": true,
 *      "sources": [{"name": "python-stdlib", "split": "pretrain", "uri": "…", "sha256": "…"}, …]}
 */

/** The `format` every data_manifest.json carries. */
const dataManifestFormat = "specdraft-data-manifest/1";

/** One training source. Either `revision` or `sha256` pins it. */
export interface DataSource {
    name: string;
    /** What it fed, e.g. `pretrain`, `distill`, `held_out`. */
    split: string;
    /** Where it came from (URL, package@version, path). */
    uri?: string;
    /** A pinned revision (git commit, package version, dataset revision). */
    revision?: string;
    /** sha256 (hex) of the content used. */
    sha256?: string;
    [extra: string]: unknown;
}

/** data_manifest.json. */
export interface DataManifest {
    format: typeof dataManifestFormat;
    /** false when the sources are not (fully) known, e.g. a folder packed without --manifest. */
    complete: boolean;
    note?: string;
    sources: DataSource[];
    [extra: string]: unknown;
}

/** The manifest `specdraft pack` writes when it was given none. */
export function unknownSourcesManifest(): DataManifest {
    return {
        format: dataManifestFormat,
        complete: false,
        note: "No data manifest was given to `specdraft pack --manifest`: this drafter's training sources are not recorded.",
        sources: [],
    };
}

/**
 * Checks `value` (parsed JSON) and returns it normalised (format and complete filled in when absent), or a message
 * naming what is wrong.
 */
export function checkDataManifest(value: unknown): DataManifest | string {
    if (typeof value !== "object" || value === null || Array.isArray(value)) return "expected a JSON object";
    const record = value as Record<string, unknown>;
    if (record.format !== undefined && record.format !== dataManifestFormat)
        return `"format": expected ${JSON.stringify(dataManifestFormat)}, found ${JSON.stringify(record.format)}`;
    if (record.complete !== undefined && typeof record.complete !== "boolean")
        return `"complete": expected true or false, found ${JSON.stringify(record.complete)}`;
    if (!Array.isArray(record.sources)) return `"sources": expected an array of {name, split, revision | sha256}`;
    const sources = record.sources as unknown[];
    for (let i = 0; i < sources.length; i++) {
        const source = sources[i];
        if (typeof source !== "object" || source === null || Array.isArray(source))
            return `"sources"[${i}]: expected an object`;
        const s = source as Record<string, unknown>;
        if (typeof s.name !== "string" || s.name.length === 0)
            return `"sources"[${i}].name: expected a non-empty string`;
        if (typeof s.split !== "string" || s.split.length === 0)
            return `"sources"[${i}] (${s.name}).split: expected the split it fed, e.g. "pretrain"`;
        const hasRevision = typeof s.revision === "string" && s.revision.length > 0;
        const hasHash = typeof s.sha256 === "string" && /^[0-9a-f]{64}$/.test(s.sha256);
        if (s.sha256 !== undefined && !hasHash)
            return `"sources"[${i}] (${s.name}).sha256: expected 64 lowercase hex digits`;
        if (!hasRevision && !hasHash)
            return `"sources"[${i}] (${s.name}): expected a pinned "revision" or a content "sha256"`;
    }
    const complete = record.complete === undefined ? true : (record.complete as boolean);
    if (complete && sources.length === 0)
        return `"sources" is empty: list the training sources, or say "complete": false with a "note"`;
    return { ...record, format: dataManifestFormat, complete, sources: sources as DataSource[] } as DataManifest;
}
