/**
 * The conversation key a draft request carries, so that a proxy in front of several `specdraft serve` replicas keeps a
 * conversation on the replica whose KV cache holds its prefix (deploy/haproxy.cfg hashes on it; docs/deploy.md). Every
 * specdraft client sends it: validate's walk one key per conversation, generate's HTTP drafter one per generation,
 * serveBench one per stream. A server ignores it.
 */
import { randomUUID } from "node:crypto";

/** The request header naming the conversation (HTTP header names are case-insensitive; sent in lower case). */
export const conversationHeader = "x-specdraft-conversation";

/** A key for a new conversation: random, so that keys spread evenly over the replicas and never collide across clients. */
export function newConversationKey(): string {
    return randomUUID();
}
