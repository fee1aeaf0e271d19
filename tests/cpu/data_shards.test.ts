/**
 * The shard format: records written and read back bit for bit (u16 and i32 ids), every header and size
 * check with an error naming the file and offset, the payload checksum catching a flipped byte, record
 * validation, and atomic writes that leave nothing behind on failure. CRC-32 against its check value.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { crc32 } from "../../data/shards/crc32.ts";
import { ShardError } from "../../data/shards/errors.ts";
import { encodeHeader, recordLayout } from "../../data/shards/format.ts";
import { ShardFile } from "../../data/shards/reader.ts";
import type { Instance } from "../../data/shards/record.ts";
import { RecordBuffer, writeFileAtomic, writeShard } from "../../data/shards/writer.ts";
import { seededRandom } from "../../cases/random.ts";

async function withTemp<T>(f: (dir: string) => Promise<T>): Promise<T> {
  const dir = await Deno.makeTempDir({ prefix: "bertfuse-shards-" });
  try {
    return await f(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

/** A random well-formed instance: [CLS] A [SEP] B [SEP] shape, ascending masked positions. */
function randomInstance(r: ReturnType<typeof seededRandom>, S: number, P: number, V: number): Instance {
  const n = r.int(5, S + 1);
  const segmentBStart = r.int(3, n - 1);
  const inputIds = Array.from({ length: n }, () => r.int(0, V));
  const free = Array.from({ length: n - 2 }, (_, i) => i + 1).filter((i) => i !== segmentBStart - 1);
  const m = r.int(0, Math.min(P, free.length) + 1);
  for (let i = free.length - 1; i > 0; i--) {
    const j = r.int(0, i + 1);
    [free[i], free[j]] = [free[j], free[i]];
  }
  const maskedLmPositions = free.slice(0, m).sort((a, b) => a - b);
  const maskedLmIds = maskedLmPositions.map(() => r.int(0, V));
  return { inputIds, segmentBStart, maskedLmPositions, maskedLmIds, nextSentenceLabel: r.int(0, 2) };
}

async function writeRandomShard(path: string, count: number, S = 32, P = 5, V = 1000, seed = 1) {
  const r = seededRandom(seed);
  const layout = recordLayout(S, P, V);
  const buf = new RecordBuffer(layout, 0, 2);
  const instances: Instance[] = [];
  for (let k = 0; k < count; k++) {
    const x = randomInstance(r, S, P, V);
    instances.push(x);
    buf.append(
      x.inputIds,
      x.inputIds.length,
      x.segmentBStart,
      x.maskedLmPositions,
      x.maskedLmIds,
      x.maskedLmPositions.length,
      x.nextSentenceLabel,
    );
  }
  const written = await writeShard(path, layout, { vocabSize: V, padId: 0 }, buf.payload());
  return { instances, layout, written };
}

function assertShardError(f: () => unknown, file: string, fragment: string, offset?: number) {
  assert.throws(f, (e: unknown) => {
    assert.ok(e instanceof ShardError, `not a ShardError: ${e}`);
    assert.ok(e.message.includes(file), `message does not name the file: ${e.message}`);
    assert.ok(e.message.includes(fragment), `'${fragment}' not in: ${e.message}`);
    if (offset !== undefined) {
      assert.equal(e.offset, offset, e.message);
      assert.ok(e.message.includes(`byte offset ${offset}`), e.message);
    }
    return true;
  });
}

Deno.test("crc32 matches the standard check value and chains", () => {
  const data = new TextEncoder().encode("123456789");
  assert.equal(crc32(data), 0xcbf43926);
  assert.equal(crc32(new Uint8Array(0)), 0);
  const big = new Uint8Array(1001).map((_, i) => (i * 7 + 3) & 0xff);
  assert.equal(crc32(big.subarray(500), crc32(big.subarray(0, 500))), crc32(big));
  // The slicing-by-8 path against the bytewise definition on an unaligned length.
  let c = ~0 >>> 0;
  for (const b of big) {
    c ^= b;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  }
  assert.equal(crc32(big), ~c >>> 0);
});

Deno.test("records round-trip through a shard file, u16 and i32 ids", async () => {
  await withTemp(async (dir) => {
    for (const V of [1000, 70000]) {
      const path = join(dir, `s${V}.bin`);
      const { instances, layout, written } = await writeRandomShard(path, 300, 40, 6, V, V);
      assert.equal(layout.idDtype, V > 65536 ? "i32" : "u16");
      assert.equal(written.records, 300);
      assert.equal((await Deno.stat(path)).size, written.bytes);
      const shard = ShardFile.open(path, { verify: true });
      assert.equal(shard.recordCount, 300);
      assert.equal(shard.header.vocabSize, V);
      for (let i = 0; i < 300; i++) assert.deepEqual(shard.instance(i), instances[i], `record ${i}`);
      shard.close();
    }
  });
});

Deno.test("header: seek position of a record is header_size + i * record_size", async () => {
  await withTemp(async (dir) => {
    const path = join(dir, "s.bin");
    const { instances, layout } = await writeRandomShard(path, 10);
    const shard = ShardFile.open(path);
    assert.equal(shard.header.headerSize % 64, 0);
    assert.equal(shard.header.recordSize, layout.recordSize);
    const bytes = await Deno.readFile(path);
    assert.equal(bytes.length, shard.header.headerSize + 10 * layout.recordSize);
    // num_tokens of record 7, read straight from the file at the computed offset.
    const at = shard.offsetOf(7) + layout.numTokens;
    assert.equal(bytes[at] | (bytes[at + 1] << 8), instances[7].inputIds.length);
    shard.close();
  });
});

Deno.test("a flipped byte anywhere in the payload fails the checksum", async () => {
  await withTemp(async (dir) => {
    const path = join(dir, "s.bin");
    await writeRandomShard(path, 50);
    const good = await Deno.readFile(path);
    const headerSize = ShardFile.open(path).header.headerSize;
    const r = seededRandom(7);
    for (let trial = 0; trial < 20; trial++) {
      const bad = good.slice();
      const at = r.int(headerSize, bad.length);
      bad[at] ^= 1 << r.int(0, 8);
      await Deno.writeFile(path, bad);
      assertShardError(
        () => ShardFile.open(path, { verify: true }),
        path,
        "payload checksum mismatch",
        headerSize,
      );
    }
  });
});

Deno.test("a flipped byte in the header fails the header checksum or the magic", async () => {
  await withTemp(async (dir) => {
    const path = join(dir, "s.bin");
    await writeRandomShard(path, 5);
    const good = await Deno.readFile(path);
    for (const at of [0, 9, 16, 30, 40, 70, 100]) {
      const bad = good.slice();
      bad[at] ^= 0x10;
      await Deno.writeFile(path, bad);
      assert.throws(
        () => ShardFile.open(path),
        (e: unknown) => e instanceof ShardError && e.message.includes(path),
      );
    }
    const bad = good.slice();
    bad[0] = 0x58;
    await Deno.writeFile(path, bad);
    assertShardError(() => ShardFile.open(path), path, "bad magic", 0);
  });
});

Deno.test("truncated shards and trailing bytes name the file and the offset", async () => {
  await withTemp(async (dir) => {
    const path = join(dir, "s.bin");
    const { layout } = await writeRandomShard(path, 20);
    const good = await Deno.readFile(path);
    const headerSize = good.length - 20 * layout.recordSize;
    // Cut inside record 13.
    const cut = headerSize + 13 * layout.recordSize + 5;
    await Deno.writeFile(path, good.subarray(0, cut));
    assertShardError(() => ShardFile.open(path), path, "record 13 is incomplete", cut);
    // Cut inside the header.
    await Deno.writeFile(path, good.subarray(0, 40));
    assertShardError(() => ShardFile.open(path), path, "truncated header", 0);
    await Deno.writeFile(path, good.subarray(0, 70));
    assertShardError(() => ShardFile.open(path), path, "truncated header", 70);
    // Extra bytes after the last record.
    const longer = new Uint8Array(good.length + 3);
    longer.set(good);
    await Deno.writeFile(path, longer);
    assertShardError(() => ShardFile.open(path), path, "3 unexpected bytes", good.length);
    // Not there at all.
    assertShardError(() => ShardFile.open(join(dir, "none.bin")), "none.bin", "file not found");
  });
});

Deno.test("an impossible record with a valid checksum is refused at the record, with its offset", async () => {
  await withTemp(async (dir) => {
    const path = join(dir, "s.bin");
    const { layout } = await writeRandomShard(path, 10, 32, 5, 1000);
    const bytes = await Deno.readFile(path);
    const shard0 = ShardFile.open(path);
    const h = shard0.header;
    shard0.close();
    const cases: [number, number, string][] = [
      [layout.numTokens, 200, "num_tokens 200"],
      [layout.nextSentenceLabel, 2, "next_sentence_label 2"],
      [layout.inputIds + 2, 0xff, "outside the vocabulary"],
    ];
    for (const [field, value, fragment] of cases) {
      const bad = bytes.slice();
      const base = h.headerSize + 4 * h.recordSize;
      bad[base + field] = value;
      bad[base + field + 1] = field === layout.nextSentenceLabel
        ? bad[base + field + 1]
        : value === 0xff
        ? 0xff
        : 0;
      // Re-seal the checksum so only the record checks can catch it.
      const payload = bad.subarray(h.headerSize);
      bad.set(encodeHeader({ ...h, payloadCrc32: crc32(payload) }), 0);
      await Deno.writeFile(path, bad);
      const shard = ShardFile.open(path, { verify: true });
      assertShardError(() => shard.instance(4), path, fragment, base);
      assert.throws(() => shard.instance(4), /record 4: /);
      assert.equal(shard.instance(3).inputIds.length > 0, true);
      shard.close();
    }
  });
});

Deno.test("a schema with a missing or mis-sized field is refused", async () => {
  await withTemp(async (dir) => {
    const path = join(dir, "s.bin");
    const layout = recordLayout(16, 3, 100);
    for (
      const [fields, fragment] of [
        [layout.fields.filter((f) => f.name !== "num_masked"), "missing field 'num_masked'"],
        [
          layout.fields.map((f) => f.name === "masked_lm_positions" ? { ...f, count: 2 } : f),
          "field 'masked_lm_positions' is 2 x u16, expected 3 x u16",
        ],
        [layout.fields.map((f) => f.name === "num_tokens" ? { ...f, offset: f.offset - 2 } : f), "overlap"],
      ] as const
    ) {
      const header = encodeHeader({
        recordCount: 0,
        recordSize: layout.recordSize,
        seqLength: 16,
        maxPredictions: 3,
        vocabSize: 100,
        padId: 0,
        payloadCrc32: 0,
        fields: [...fields],
      });
      await Deno.writeFile(path, header);
      assertShardError(() => ShardFile.open(path), path, fragment);
    }
  });
});

Deno.test("atomic write: a failing source leaves neither the file nor a temporary", async () => {
  await withTemp(async (dir) => {
    const path = join(dir, "out.bin");
    async function* failing() {
      yield new Uint8Array(1000).fill(7);
      throw new Error("disk on fire");
    }
    await assert.rejects(() => writeFileAtomic(path, failing()), /disk on fire/);
    assert.deepEqual([...Deno.readDirSync(dir)], []);
    // An existing file is left as it was.
    await Deno.writeTextFile(path, "old");
    await assert.rejects(() => writeFileAtomic(path, failing()), /disk on fire/);
    assert.equal(await Deno.readTextFile(path), "old");
    assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name), ["out.bin"]);
    // A successful write replaces it whole.
    await writeFileAtomic(path, [new Uint8Array([1, 2]), new Uint8Array([3])]);
    assert.deepEqual(await Deno.readFile(path), new Uint8Array([1, 2, 3]));
    assert.deepEqual([...Deno.readDirSync(dir)].map((e) => e.name), ["out.bin"]);
  });
});
