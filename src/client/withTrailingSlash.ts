/** `url` ending in `/`, so `new URL("draft", …)` resolves below its path instead of replacing its last segment. */
export function withTrailingSlash(url: string): string {
    return url.endsWith("/") ? url : `${url}/`;
}
