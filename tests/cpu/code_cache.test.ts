/** runtime/code_cache.ts: entries with their SHA-256; planted or damaged ones missed; open folders refused. */
import assert from "node:assert/strict";
import { CodeCache, codeCacheDir, CodeCacheError } from "../../runtime/code_cache.ts";
import { KernelCache, kernelCacheKey } from "../../runtime/cuda/kernel_cache.ts";

Deno.test("code cache: written with its hash, read back; planted, damaged and removed entries are misses", () => {
  const dir = Deno.makeTempDirSync();
  try {
    const cache = new KernelCache(`${dir}/cuda`);
    const key = kernelCacheKey({
      source: `k${Math.random()}`,
      arch: "sm_90",
      nvrtcVersion: "13.0",
      options: [],
    });
    assert.equal(cache.get(key), null);
    const bytes = crypto.getRandomValues(new Uint8Array(64));
    cache.put(key, bytes);
    assert.deepEqual(cache.get(key), bytes);
    const names = [...Deno.readDirSync(`${dir}/cuda`)].map((e) => e.name).sort();
    assert.deepEqual(names, [`${key}.cubin`, `${key}.cubin.sha256`]);
    // A byte changed after the build: the recorded hash no longer matches.
    Deno.writeFileSync(cache.path(key), bytes.map((b, i) => (i === 7 ? b ^ 1 : b)));
    assert.equal(cache.get(key), null);
    // An entry planted without a hash beside it.
    const planted = kernelCacheKey({ source: "planted", arch: "sm_90", nvrtcVersion: "13.0", options: [] });
    Deno.writeFileSync(cache.path(planted), bytes);
    assert.equal(cache.get(planted), null);
    cache.put(key, bytes);
    cache.remove(key);
    assert.equal(cache.get(key), null);
    assert.deepEqual([cache.hits, cache.misses], [1, 4]);
    // A folder others may write: refused, not loaded.
    cache.put(key, bytes);
    Deno.chmodSync(`${dir}/cuda`, 0o777);
    assert.throws(() => cache.get(key), (e) => e instanceof CodeCacheError && /by others/.test(e.message));
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("code cache: one root for every kind ($BERTFUSE_CACHE/<kind>, else XDG_CACHE_HOME or HOME)", () => {
  const env = (vars: Record<string, string>) => (name: string) => vars[name];
  assert.equal(codeCacheDir("cuda", env({ BERTFUSE_CACHE: "/c/", HOME: "/h" })), "/c/cuda");
  assert.equal(codeCacheDir("cpu", env({ XDG_CACHE_HOME: "/x", HOME: "/h" })), "/x/bertfuse/cpu");
  assert.equal(codeCacheDir("cuda", env({ HOME: "/h" })), "/h/.cache/bertfuse/cuda");
  assert.match(codeCacheDir("cpu", env({})), /^\/tmp\/bertfuse-[0-9a-z]+\/bertfuse\/cpu$/);
  assert.ok(new CodeCache("/nowhere", ".so").path("k").endsWith("/nowhere/k.so"));
});
