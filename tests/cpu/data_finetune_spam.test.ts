/** The built-in SpamAssassin task on the real corpus: labels, the fixed split, messages, features. */
import assert from "node:assert/strict";
import {
  classificationFeatures,
  loadSpam,
  parseMessage,
  spamExamples,
  spamIndex,
  spamSplit,
} from "../../data/finetune/mod.ts";
import { fnv1a } from "../../data/finetune/spam.ts";
import { defaultTokenizer } from "../../data/tokenizer/mod.ts";

const index = await spamIndex();
const count = (f: (m: typeof index[number]) => boolean) => index.filter(f).length;

Deno.test("the corpus: 6,046 messages in five groups, spam-1/2 labeled spam", () => {
  assert.equal(index.length, 6046);
  const groups = Object.fromEntries(
    ["easy-ham-1", "easy-ham-2", "hard-ham-1", "spam-1", "spam-2"].map((
      g,
    ) => [g, count((m) => m.group === g)]),
  );
  assert.deepEqual(groups, {
    "easy-ham-1": 2500,
    "easy-ham-2": 1400,
    "hard-ham-1": 250,
    "spam-1": 500,
    "spam-2": 1396,
  });
  assert.equal(count((m) => m.label === 1), 1896);
  assert.ok(index.every((m) => m.label === (m.group.startsWith("spam") ? 1 : 0)));
  assert.equal(new Set(index.map((m) => m.key)).size, 6046, "keys are unique");
});

Deno.test("the fixed split: FNV-1a of the checksum, 625 dev / 5,421 train, same every time", () => {
  // FNV-1a 32-bit reference values.
  assert.equal(fnv1a(""), 0x811c9dc5);
  assert.equal(fnv1a("a"), 0xe40c292c);
  assert.equal(fnv1a("foobar"), 0xbf9cf968);
  assert.equal(count((m) => m.split === "dev"), 625);
  assert.equal(count((m) => m.split === "train"), 5421);
  assert.equal(count((m) => m.split === "dev" && m.label === 1), 198);
  assert.ok(index.every((m) => spamSplit(m.checksum) === m.split));
  assert.equal(spamSplit("7c53336b37003a9286aba55d2945844c"), spamSplit("7c53336b37003a9286aba55d2945844c"));
});

Deno.test("dev messages load with subject and body; features are sentence pairs with labels", async () => {
  const dev = await loadSpam("dev");
  assert.equal(dev.length, 625);
  assert.deepEqual(dev.map((m) => m.key), index.filter((m) => m.split === "dev").map((m) => m.key));
  assert.ok(dev.every((m) => m.body.length > 0));
  assert.ok(dev.filter((m) => m.subject.length > 0).length > 600);
  const first = dev.find((m) => m.key === "easy-ham-1/00003")!;
  assert.equal(first.subject, "[zzzzteana] Moscow bomber");
  assert.match(first.body, /^Man Threatens Explosion In Moscow/);
  const tok = await defaultTokenizer();
  const examples = spamExamples(dev.slice(0, 40));
  const features = classificationFeatures(examples, tok, 128);
  features.forEach((f, i) => {
    assert.equal(f.input_ids.length, 128);
    assert.equal(f.label, dev[i].label);
    const subject = tok.tokenize(dev[i].subject).ids;
    // The subject survives truncation whole (the body is cut first), right after [CLS].
    assert.deepEqual(f.input_ids.slice(0, subject.length + 2), [101, ...subject, 102]);
    assert.equal(f.token_type_ids[subject.length + 2], 1);
  });
});

Deno.test("parseMessage: folded Subject, headers dropped, base64 blocks dropped", () => {
  const raw = [
    "From: a@b.c",
    "Subject: Cheap meds",
    "\tand more!!!",
    "Content-Type: text/plain",
    "",
    "Buy now.",
    "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVphYmNkZWZnaGlqa2xtbm9wcXJzdHV2d3h5ejAxMjM0NTY3",
    "Bye.",
  ].join("\r\n");
  assert.deepEqual(parseMessage(raw), { subject: "Cheap meds and more!!!", body: "Buy now. Bye." });
  assert.deepEqual(parseMessage("Subject: only headers"), { subject: "only headers", body: "" });
});
