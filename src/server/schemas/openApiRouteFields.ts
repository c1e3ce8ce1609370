/**
 * The OpenAPI fields a route schema may carry besides what Fastify validates (Fastify ignores them;
 * buildOpenApiDocument.ts reads them).
 */

declare module "fastify" {
    interface FastifySchema {
        /** One line naming the operation. */
        summary?: string;
        description?: string;
        tags?: string[];
        /** Content types of the 200 answer when it is not JSON. */
        produces?: string[];
    }
}

export {};
