/**
 * deno task data-dump: prints the instances of a prepare-data directory as JSON lines, in shard and
 * record order, unpadded. Flag parsing and printing only; reading is data/shards/.
 */
import { join } from "node:path";
import { parseFlags, positiveInt, runMain, UsageError } from "./common.ts";
import { DataError } from "../data/shards/errors.ts";
import { readManifest } from "../data/shards/manifest.ts";
import { ShardFile } from "../data/shards/reader.ts";
import { loadTokenizer } from "../data/tokenizer/mod.ts";
import { vocabHash } from "../data/pretraining/vocab.ts";
import { kebabFlags } from "./flag_spelling.ts";

const HELP = `
deno task data-dump --input DIR [--limit N] [--tokens]

Prints the pretraining instances in DIR (made by deno task prepare-data) as JSON lines, in shard order:
{"input_ids":[...],"token_type_ids":[...],"attention_mask":[...],"masked_lm_positions":[...],
 "masked_lm_ids":[...],"next_sentence_label":0|1}
Rows are unpadded: input_ids, token_type_ids and attention_mask have the instance's own length, and the
masked_lm lists only the real predictions. next_sentence_label is 1 when the second segment is random.

  --input DIR   a directory with manifest.json and its shards
  --limit N     stop after N instances
  --tokens      add "tokens": the WordPiece strings of input_ids (needs the vocabulary the shards
                were made with; the manifest names it)
`;

async function main() {
  const { values } = parseFlags(kebabFlags(Deno.args), {
    input: { type: "string" },
    limit: { type: "string" },
    tokens: { type: "boolean" },
  }, HELP);
  if (!values.input) throw new UsageError("--input DIR is required (see --help)");
  const limit = positiveInt("limit", values.limit, Infinity);
  const dir = values.input;
  const manifest = await readManifest(dir);
  let idToToken: ((id: number) => string) | undefined;
  if (values.tokens) {
    const t = manifest.tokenizer;
    const tok = await loadTokenizer({
      vocab: t.source.startsWith("built-in") ? undefined : t.source,
      cased: !t.lower_case,
    });
    if ((await vocabHash(tok)) !== t.vocab_sha256) {
      throw new DataError(`--tokens: the vocabulary ${t.source} is not the one the shards were made with`);
    }
    idToToken = (id) => tok.idToToken(id);
  }

  const enc = new TextEncoder();
  let pending: string[] = [], pendingLen = 0, printed = 0;
  const flush = () => {
    const bytes = enc.encode(pending.join(""));
    for (let done = 0; done < bytes.length;) done += Deno.stdout.writeSync(bytes.subarray(done));
    pending = [];
    pendingLen = 0;
  };
  try {
    for (const entry of manifest.shards) {
      if (printed >= limit) break;
      const shard = ShardFile.open(join(dir, entry.file), { verify: true });
      try {
        const scratch = new Uint8Array(shard.header.recordSize);
        for (let i = 0; i < shard.recordCount && printed < limit; i++, printed++) {
          const r = shard.instance(i, scratch);
          const n = r.inputIds.length;
          const row: Record<string, unknown> = {
            input_ids: r.inputIds,
            token_type_ids: r.inputIds.map((_, k) => (k >= r.segmentBStart ? 1 : 0)),
            attention_mask: new Array(n).fill(1),
            masked_lm_positions: r.maskedLmPositions,
            masked_lm_ids: r.maskedLmIds,
            next_sentence_label: r.nextSentenceLabel,
          };
          if (idToToken) row.tokens = r.inputIds.map(idToToken);
          const line = JSON.stringify(row) + "\n";
          pending.push(line);
          pendingLen += line.length;
          if (pendingLen > 1 << 16) flush();
        }
      } finally {
        shard.close();
      }
    }
    flush();
  } catch (e) {
    // `data-dump | head` closes the pipe early: that is the reader's choice, not an error.
    if (e instanceof Deno.errors.BrokenPipe) return;
    throw e;
  }
}

if (import.meta.main) await runMain(main);
