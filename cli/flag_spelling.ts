/**
 * NVIDIA's scripts spell options in snake case (`--init_checkpoint`, `--do_train`); ours are kebab case.
 * Users come with NVIDIA's command lines, so every command accepts both: this rewrites the flag name of
 * each `--snake_case[=value]` argument to kebab case before parsing. Values are never touched, and
 * everything after a bare `--` is left alone. A command opts in with one call:
 * `parseFlags(kebabFlags(Deno.args), ...)`.
 */
export function kebabFlags(args: readonly string[]): string[] {
  const out: string[] = [];
  let rest = false;
  for (const a of args) {
    if (rest || !a.startsWith("--")) {
      out.push(a);
      continue;
    }
    if (a === "--") {
      rest = true;
      out.push(a);
      continue;
    }
    const eq = a.indexOf("=");
    const name = eq < 0 ? a : a.slice(0, eq);
    out.push(name.replaceAll("_", "-") + (eq < 0 ? "" : a.slice(eq)));
  }
  return out;
}
