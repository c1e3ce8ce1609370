/**
 * The shared libraries an ELF file names as DT_NEEDED (what `readelf -d` lists as NEEDED), read without binutils:
 * how `pack --bundle` finds which llama.cpp libraries the native engine links, so the bundle carries those and not
 * node-llama-cpp's own addon and helpers. 64-bit little-endian ELF only (Linux x86-64 and arm64).
 */
import { readFile } from "node:fs/promises";

const ptLoad = 1;
const ptDynamic = 2;
const dtNeeded = 1n;
const dtStrtab = 5n;

/** DT_NEEDED names of `file`, in order; throws when it is not a 64-bit little-endian ELF with a dynamic section. */
export async function readElfNeeded(file: string): Promise<string[]> {
    const elf = await readFile(file);
    if (elf.length < 64 || elf.readUInt32BE(0) !== 0x7f454c46 || elf[4] !== 2 || elf[5] !== 1)
        throw new Error(`${file} is not a 64-bit little-endian ELF file`);
    const phoff = Number(elf.readBigUInt64LE(32));
    const phentsize = elf.readUInt16LE(54);
    const phnum = elf.readUInt16LE(56);
    const loads: { vaddr: bigint; offset: bigint; size: bigint }[] = [];
    let dynamic: { offset: number; size: number } | undefined;
    for (let i = 0; i < phnum; i++) {
        const at = phoff + i * phentsize;
        const type = elf.readUInt32LE(at);
        const offset = elf.readBigUInt64LE(at + 8);
        const vaddr = elf.readBigUInt64LE(at + 16);
        const filesz = elf.readBigUInt64LE(at + 32);
        if (type === ptLoad) loads.push({ vaddr, offset, size: filesz });
        if (type === ptDynamic) dynamic = { offset: Number(offset), size: Number(filesz) };
    }
    if (dynamic === undefined) throw new Error(`${file} has no dynamic section`);
    const needed: bigint[] = [];
    let strtab: bigint | undefined;
    for (let at = dynamic.offset; at + 16 <= dynamic.offset + dynamic.size; at += 16) {
        const tag = elf.readBigInt64LE(at);
        const value = elf.readBigUInt64LE(at + 8);
        if (tag === 0n) break; // DT_NULL
        if (tag === dtNeeded) needed.push(value);
        if (tag === dtStrtab) strtab = value;
    }
    if (strtab === undefined) throw new Error(`${file} has no dynamic string table`);
    // DT_STRTAB is a virtual address: the load segment holding it says where it lies in the file
    const segment = loads.find((s) => strtab >= s.vaddr && strtab < s.vaddr + s.size);
    if (segment === undefined) throw new Error(`${file}: its dynamic string table lies in no loaded segment`);
    const strings = Number(strtab - segment.vaddr + segment.offset);
    return needed.map((offset) => {
        const start = strings + Number(offset);
        return elf.toString("latin1", start, elf.indexOf(0, start));
    });
}
